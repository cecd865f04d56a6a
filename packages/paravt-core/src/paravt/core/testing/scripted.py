"""Light stand-ins for tests and examples: a scripted engine and a toolbox of fixed frames.

`ScriptedEngine` tokenizes one token per character (images become one placeholder token each), so
tests can check token bookkeeping exactly without a model. Real engines live in
`paravt.core.engines`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from paravt.core.protocol import CropVideoArgs, Frame, ImagePart, Message, ToolOutput
from paravt.core.runtime import Encoded, FinishReason, Generated, SamplingParams, Trajectory

IMAGE_TOKEN = 0
END_OF_TURN = "\x03"  # the scripted engine's end-of-turn token (one character)


def _render(messages: Sequence[Message]) -> tuple[str, list[Any]]:
    text, media = [], []
    for m in messages:
        text.append(f"[{m.role}]")
        for part in m.parts:
            if isinstance(part, ImagePart):
                text.append("\x00")
                media.append(part.image)
            else:
                text.append(part.text)
        text.append(END_OF_TURN)
    return "".join(text), media


def _ids(text: str) -> list[int]:
    return [ord(c) for c in text]


@dataclass
class ScriptedEngine:
    """Answers from `respond(trajectory) -> text`; records every batch it was asked to generate."""

    respond: Callable[[Trajectory], str]
    batches: list[list[Trajectory]] = field(default_factory=list)

    def encode_prompt(self, messages: Sequence[Message], *, assistant_prefix: str = "") -> Encoded:
        text, media = _render(messages)
        return Encoded(_ids(text + "[assistant]" + assistant_prefix), media)

    def encode_continuation(
        self, messages: Sequence[Message], *, previous: Generated, assistant_prefix: str = ""
    ) -> Encoded:
        close = "" if previous.text.endswith(END_OF_TURN) else END_OF_TURN
        text, media = _render(messages)
        return Encoded(_ids(close + text + "[assistant]" + assistant_prefix), media)

    async def generate(
        self, trajectories: Sequence[Trajectory], sampling: SamplingParams
    ) -> list[Generated]:
        self.batches.append(list(trajectories))
        outs = []
        for traj in trajectories:
            full = self.respond(traj)
            text = full[: sampling.max_new_tokens]
            ids = _ids(text)
            finish: FinishReason = "length" if len(full) > len(text) else "stop"
            outs.append(Generated(text, ids, [-0.5] * len(ids), finish))
        return outs


@dataclass
class StaticToolbox:
    """A toolbox over a video of `duration_s` seconds whose frames are ("frame", timestamp)
    tuples, or `image(timestamp)` when given (e.g. a uint8 array, for an engine that encodes it).

    Windows are clamped to the video like the real tool; `fail_starts` makes chosen starts fail.
    """

    duration_s: float = 60.0
    fps: float = 1.0
    fail_starts: frozenset[float] = frozenset()
    calls: list[list[CropVideoArgs]] = field(default_factory=list)
    image: Callable[[float], Any] | None = None

    async def execute(self, calls: Sequence[CropVideoArgs]) -> list[ToolOutput]:
        self.calls.append(list(calls))
        outputs = []
        for call in calls:
            if call.start_time in self.fail_starts:
                outputs.append(ToolOutput.failure(f"decode failed at {call.start_time:g} s"))
                continue
            start, end = min(call.start_time, self.duration_s), min(call.end_time, self.duration_s)
            if end <= start:
                outputs.append(
                    ToolOutput.failure(
                        f"window {call.start_time:g}-{call.end_time:g} s is past the end of the "
                        f"video ({self.duration_s:g} s)"
                    )
                )
                continue
            n = call.num_frames or max(1, min(16, int((end - start) * self.fps)))
            step = (end - start) / n
            times = [start + step * (k + 0.5) for k in range(n)]
            image = self.image or (lambda t: ("frame", t))
            frames = [Frame(image(t), t) for t in times]
            outputs.append(ToolOutput(text=f"{n} frames", frames=frames, window_s=(start, end)))
        return outputs
