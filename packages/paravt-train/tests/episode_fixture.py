"""A recorded run that learnt invalid calls, without a model: scripted main turns through the real
agent runtime, a static toolbox of coloured-square frames, the real rewards and the real
`EpisodeRecorder`. Step by step more of the agent's crop_video calls are invalid (the empty window
8.0-8.0 the `prior` task found, JSON cut short, an unknown tool), as the GPU run's policy did."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from paravt.core import AgentConfig, AgentTask, Frame, build_main_prompt, run_episodes_sync
from paravt.core.episode import Trajectory
from paravt.core.testing import ScriptedEngine, StaticToolbox
from paravt.rewards import RewardConfig, group_advantages, score_episode
from paravt.train.episodes import EpisodeRecorder
from paravt.train.rl.rollouts import Rollouts

DURATION_S = 16.0
SQUARE_S = (4.0, 6.0)
COLOURS = {"red": (220, 30, 30), "blue": (30, 60, 220), "green": (30, 180, 60)}
GOOD = '{"name": "crop_video", "arguments": {"start_time": %g, "end_time": %g}}'
BAD = {
    "invalid_arguments": '{"name": "crop_video", "arguments": {"start_time": 8.0, "end_time": 8.0}}',
    "invalid_json": '{"name": "crop_video", "arguments": {"start_time": 2, "end_time": }}',
    "unknown_tool": '{"name": "zoom_video", "arguments": {"start_time": 0, "end_time": 4}}',
}


@dataclass
class Example:
    key: str
    answer: str
    question: str = "What colour is the square?"
    question_type: str = "oe"
    extra_info: dict[str, Any] = field(default_factory=dict)


def frame_image(colour: str, t: float) -> np.ndarray:
    img = np.full((96, 128, 3), 40, dtype=np.uint8)
    if SQUARE_S[0] <= t <= SQUARE_S[1]:
        img[24:72, 40:88] = COLOURS[colour]
    img[-6:, : int(128 * t / DURATION_S)] = 200  # a progress bar: frames differ in time
    return img


def invalid_share(step: int, steps: int) -> float:
    """The share of calls the policy gets wrong at `step`: 0 at the start, 0.8 at the end."""
    return 0.8 * (step - 1) / max(steps - 1, 1)


def _turn_one(n: int, share: float) -> str:
    """Episode `n`'s first turn: two crops, each invalid with probability `share` (a
    low-discrepancy sequence, so every step's share is close to it)."""
    calls = []
    for c, (start, end) in enumerate(((0.0, 8.0), (8.0, 16.0))):
        u = ((2 * n + c + 1) * 0.6180339887) % 1.0
        if u < share:
            calls.append(BAD[sorted(BAD)[(2 * n + c) % len(BAD)]])
        else:
            calls.append(GOOD % (start, end))
    body = "".join(f"<tool_call>{c}</tool_call>" for c in calls)
    return "I cannot see a square in the overview; I will crop both halves.</think>" + body


def record_run(
    out: Path,
    *,
    steps: int = 6,
    prompts: int = 4,
    group: int = 2,
    per_k: int = 3,
    max_mib: float = 50.0,
) -> Path:
    """Write `out/episodes/` for `steps` steps; returns `out`."""
    recorder = EpisodeRecorder(out / "episodes", per_k=per_k, max_mib=max_mib)
    config = AgentConfig(max_turns=2, max_parallel=4, think_prefix=True)
    # the released reward, which pays a call that parses whether or not it brought evidence
    reward_config = RewardConfig.reference_paragrpo()
    colours = sorted(COLOURS)
    for step in range(1, steps + 1):
        share = invalid_share(step, steps)
        seen: dict[int, int] = {}
        answers: dict[int, str] = {}

        def respond(
            traj: Trajectory,
            share: float = share,
            seen: dict[int, int] = seen,
            answers: dict[int, str] = answers,
        ) -> str:
            if traj.role == "subagent":
                return "</think><answer>A square is visible from 4.0 s to 6.0 s.</answer>"
            n = seen.setdefault(id(traj), len(seen))
            if not any(m.role == "assistant" for m in traj.messages):
                if n % 4 == 2:  # answers from the overview alone, sometimes the prior's way
                    guess = colours[n % len(colours)]
                    if (n // 4) % 2:
                        return f"The square is {guess}.</think>The answer is {guess}."
                    return f"The overview is enough.</think><answer>{guess}</answer>"
                return _turn_one(n, share)
            return f"The crops show it.</think><answer>{answers.get(n, 'red')}</answer>"

        examples, tasks, budgets, per_episode = [], [], [], []
        for p in range(prompts):
            colour = colours[(step + p) % len(colours)]
            ex = Example(f"s{step}p{p}", colour)
            examples.append(ex)
            k = (2, 4)[p % 2]
            overview = [
                Frame(frame_image(colour, (i + 0.5) * DURATION_S / k), (i + 0.5) * DURATION_S / k)
                for i in range(k)
            ]
            messages = build_main_prompt(ex.question, overview, duration_s=DURATION_S)
            for j in range(group):
                toolbox = StaticToolbox(
                    duration_s=DURATION_S, fps=0.5, image=lambda t, c=colour: frame_image(c, t)
                )
                tasks.append(AgentTask(f"{ex.key}#{j}", messages, toolbox, ex.question))
                budgets.append(k)
                per_episode.append(ex)
        for n, ex in enumerate(per_episode):
            answers[n] = ex.answer if n % 4 else colours[(colours.index(ex.answer) + 1) % 3]
        episodes = run_episodes_sync(tasks, ScriptedEngine(respond), config)
        ro = Rollouts(episodes, per_episode, budgets)
        ro.rewards = [
            score_episode(ep, ex.answer, ex.question_type, reward_config)
            for ep, ex in zip(episodes, per_episode)
        ]
        ro.advantages = group_advantages([r.total for r in ro.rewards], group)
        recorder.record(step, ro, weight_version=step - 1)
    return out
