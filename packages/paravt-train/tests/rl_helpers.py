"""Test doubles for RL tests: in-memory examples, a frame source of coloured squares, and scripted
episodes (one token per character) for the trainer's scoring."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from paravt.core import AgentConfig, AgentTask, Episode, Message, run_episodes_sync
from paravt.core.protocol import CropVideoArgs, Frame, ToolOutput
from paravt.core.runtime import Trajectory
from paravt.core.testing import ScriptedEngine, StaticToolbox

COLOURS = {"red": (255, 0, 0), "blue": (0, 0, 255), "green": (0, 255, 0), "yellow": (255, 255, 0)}
DURATION_S = 20.0


@dataclass
class Example:
    key: str
    answer: str
    question: str = "What colour is the square?"
    question_type: str = "oe"
    video: Path = Path("unused.mp4")
    system: str | None = None
    extra_info: dict[str, Any] = field(default_factory=dict)


def _frame(colour: str, t: float) -> Frame:
    img = np.zeros((64, 64, 3), dtype=np.uint8)
    img[16:48, 16:48] = COLOURS[colour]
    return Frame(img, t)


@dataclass
class SquareToolbox:
    colour: str

    async def execute(self, calls: Sequence[CropVideoArgs]) -> list[ToolOutput]:
        outs = []
        for c in calls:
            end = min(c.end_time, DURATION_S)
            if end <= c.start_time:
                outs.append(ToolOutput.failure("window past the end of the video"))
                continue
            frames = [_frame(self.colour, c.start_time), _frame(self.colour, end)]
            outs.append(ToolOutput(text="2 frames", frames=frames, window_s=(c.start_time, end)))
        return outs


class SquareFrames:
    """Overview: k frames of the example's square; toolbox: two frames per window."""

    def __init__(self, colour_of: dict[str, str]) -> None:
        self.colour_of = colour_of
        self.budgets: list[int] = []

    def overview(self, video: Any, k: int) -> tuple[list[Frame], float]:
        self.budgets.append(k)
        colour = self.colour_of[str(video)]
        return [_frame(colour, i * DURATION_S / k) for i in range(k)], DURATION_S

    def toolbox(self, video: Any) -> SquareToolbox:
        return SquareToolbox(self.colour_of[str(video)])


def examples() -> tuple[list[Example], SquareFrames]:
    exs = [Example(f"ex{i}", c, video=Path(f"v{i}.mp4")) for i, c in enumerate(COLOURS)]
    return exs, SquareFrames({str(e.video): e.answer for e in exs})


TWO_CALLS = (
    "Let me look closer at two windows.</think>"
    '<tool_call>{"name": "crop_video", "arguments": {"start_time": 0, "end_time": 5}}</tool_call>'
    '<tool_call>{"name": "crop_video", "arguments": {"start_time": 5, "end_time": 10}}</tool_call>'
)


class EveryOtherScripted:
    """Scripts the first main turn (TWO_CALLS) of every other rollout; all other generations, the
    sub-agents included, are the real model's. Groups are consecutive, so each group holds a
    rollout that calls the tool and one that (a random model) does not: rewards differ."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    def encode_prompt(self, messages: Any, *, assistant_prefix: str = "") -> Any:
        return self.engine.encode_prompt(messages, assistant_prefix=assistant_prefix)

    def encode_continuation(
        self, messages: Any, *, previous: Any, assistant_prefix: str = ""
    ) -> Any:
        return self.engine.encode_continuation(
            messages, previous=previous, assistant_prefix=assistant_prefix
        )

    async def generate(self, trajectories: Sequence[Any], sampling: Any) -> list[Any]:
        first_turn = [
            i
            for i, t in enumerate(trajectories)
            if t.role == "main" and not any(m.role == "assistant" for m in t.messages)
        ]
        script = {i for n, i in enumerate(first_turn) if n % 2 == 0}
        real = [i for i in range(len(trajectories)) if i not in script]
        outs = await self.engine.generate([trajectories[i] for i in real], sampling) if real else []
        results: dict[int, Any] = dict(zip(real, outs))
        for i in script:
            results[i] = self.engine.encode_generation(TWO_CALLS)
        return [results[i] for i in range(len(trajectories))]


class AlternateScripted:
    """Scripts every other first main turn (TWO_CALLS, in request order) so groups hold a rollout
    that calls the tool (its sub-agents run on the server) and one that does not; forwards the
    server engine's `continuous_batching`, so the runtime sends requests one by one."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.continuous_batching = getattr(engine, "continuous_batching", False)
        self.first_turns = 0

    def encode_prompt(self, messages: Any, *, assistant_prefix: str = "") -> Any:
        return self.engine.encode_prompt(messages, assistant_prefix=assistant_prefix)

    def encode_continuation(
        self, messages: Any, *, previous: Any, assistant_prefix: str = ""
    ) -> Any:
        return self.engine.encode_continuation(
            messages, previous=previous, assistant_prefix=assistant_prefix
        )

    async def generate(self, trajectories: Any, sampling: Any) -> list[Any]:
        results: dict[int, Any] = {}
        real = []
        for i, t in enumerate(trajectories):
            if t.role == "main" and not any(m.role == "assistant" for m in t.messages):
                self.first_turns += 1
                if self.first_turns % 2 == 1:
                    results[i] = self.engine.encode_generation(TWO_CALLS)
                    continue
            real.append(i)
        if real:
            outs = await self.engine.generate([trajectories[i] for i in real], sampling)
            results.update(zip(real, outs))
        return [results[i] for i in range(len(trajectories))]


CALL = (
    '<tool_call>{"name": "crop_video", "arguments": {"start_time": 4, "end_time": 8}}</tool_call>'
)


class CharEngine(ScriptedEngine):
    """The scripted engine (one token per character) with the decode the trainer's offsets use."""

    def decode(self, ids: list[int]) -> str:
        return "".join(chr(i) for i in ids)


LOOK = "The overview is too coarse here.</think>"
SEEN = "The crops show the square clearly.</think>"
GUESS = "The overview hints at a colour.</think>"


def prefixed_episodes(plan: list[str]) -> tuple[list[Episode], CharEngine]:
    """One episode per kind, every main turn after the think prefix: 'ok' (a call, then a think
    and the right answer, red), 'skip' (a call, then the right answer with the prefix's think
    never closed), 'wrong' (a wrong answer at once)."""
    kinds = {f"e{i}": k for i, k in enumerate(plan)}

    def respond(traj: Trajectory) -> str:
        if traj.role == "subagent":
            return "<answer>A red square at 6 s.</answer>"
        kind = kinds[traj.messages[0].parts[0].text]  # type: ignore[union-attr]
        turns = sum(1 for m in traj.messages if m.role == "assistant")
        if kind == "wrong":
            return f"{GUESS}<answer>blue</answer>"
        if turns == 0:
            return f"{LOOK}{CALL}"
        return "<answer>red</answer>" if kind == "skip" else f"{SEEN}<answer>red</answer>"

    engine = CharEngine(respond)
    tasks = [
        AgentTask(k, [Message("user", k)], StaticToolbox(), "What colour is the square?")
        for k in kinds
    ]
    return run_episodes_sync(tasks, engine, AgentConfig(think_prefix=True)), engine
