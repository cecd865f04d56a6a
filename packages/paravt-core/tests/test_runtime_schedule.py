"""Episodes move on their own: a slow generation holds only its own episode, requests in flight stay
bounded, an in-process engine still gets batches, the records match lockstep's, errors do not hang."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from paravt.core import (
    AgentConfig,
    AgentTask,
    CropVideoArgs,
    Frame,
    SamplingParams,
    ToolOutput,
    Trajectory,
    build_main_prompt,
    run_episodes,
)
from paravt.core.runtime import Generated
from paravt.core.testing import END_OF_TURN, ScriptedEngine, StaticToolbox


def call(start: float, end: float) -> str:
    args = {"start_time": start, "end_time": end}
    return "<tool_call>" + json.dumps({"name": "crop_video", "arguments": args}) + "</tool_call>"


def respond(traj: Trajectory) -> str:
    if traj.role == "subagent":
        return "<answer>seen</answer>" + END_OF_TURN
    turn = sum(1 for m in traj.messages if m.role == "assistant")
    if turn < 2:
        return f"t{turn}</think>" + call(0, 10) + call(20, 30) + END_OF_TURN
    return "done</think><answer>A</answer>" + END_OF_TURN


@dataclass
class TimedServer(ScriptedEngine):
    """A continuously batching stand-in: each request sleeps `delay(key, role)` seconds."""

    delays: dict[str, float] = field(default_factory=dict)
    continuous_batching: bool = True
    open_now: int = 0
    open_max: int = 0
    log: list[tuple[str, str, float]] = field(default_factory=list)  # (key, role, finished at)

    async def generate(
        self, trajectories: Sequence[Trajectory], sampling: SamplingParams
    ) -> list[Generated]:
        self.open_now += len(trajectories)
        self.open_max = max(self.open_max, self.open_now)
        try:
            keys = [t.messages[1].text.split("Q=")[-1][:2] for t in trajectories]
            await asyncio.sleep(max(self.delays.get(k, 0.01) for k in keys))
            outs = await super().generate(trajectories, sampling)
        finally:
            self.open_now -= len(trajectories)
        now = time.perf_counter()
        self.log.extend((k, t.role, now) for k, t in zip(keys, trajectories))
        return outs


def tasks(n: int) -> list[AgentTask]:
    out = []
    for i in range(n):
        question = f"Q=e{i}"
        msgs = build_main_prompt(question, [Frame("ov", 5.0)], duration_s=60.0)
        out.append(AgentTask(f"e{i}", msgs, StaticToolbox(duration_s=60.0), question))
    return out


def run(engine: object, n: int, **config: object) -> list:  # type: ignore[type-arg]
    return asyncio.run(run_episodes(tasks(n), engine, AgentConfig(max_turns=3, **config)))  # type: ignore[arg-type]


def test_a_slow_generation_holds_only_its_own_episode() -> None:
    server = TimedServer(respond, delays={"e0": 0.4})
    t0 = time.perf_counter()
    run(server, 4)
    fast_done = max(t for k, r, t in server.log if k != "e0") - t0
    slow_first = min(t for k, r, t in server.log if k == "e0") - t0
    assert fast_done < slow_first  # e1..e3 finished all 3 turns before e0's first turn returned

    lockstep = TimedServer(respond, delays={"e0": 0.4})
    t0 = time.perf_counter()
    run(lockstep, 4, schedule="lockstep")
    fast_done = max(t for k, r, t in lockstep.log if k != "e0") - t0
    assert fast_done > 3 * 0.4  # every turn waited for e0


def test_requests_in_flight_stay_under_the_bound() -> None:
    server = TimedServer(respond)
    run(server, 8, max_requests_in_flight=3)
    assert server.open_max == 3
    server = TimedServer(respond)
    run(server, 8)
    assert server.open_max > 3


class SlowToolbox(StaticToolbox):
    """Decodes take 0.01-0.05 s, different per episode (as real video decodes do)."""

    async def execute(self, calls: Sequence[CropVideoArgs]) -> list[ToolOutput]:
        await asyncio.sleep(0.01 + 0.01 * (len(self.calls) * 7 % 5))
        return await super().execute(calls)


def test_an_in_process_engine_gets_batches_of_whatever_is_waiting() -> None:
    engine = ScriptedEngine(respond)
    ts = tasks(6)
    for t in ts:
        t.toolbox = SlowToolbox(duration_s=60.0)
    episodes = asyncio.run(run_episodes(ts, engine, AgentConfig(max_turns=3)))
    sizes = [len(b) for b in engine.batches]
    assert sizes[0] == 6  # every first turn together
    assert sum(sizes) == 6 * 3 + 6 * 2 * 2  # 3 main turns and 2 x 2 sub-agents per episode
    assert max(sizes) > 1 and all(len({t.role for t in b}) == 1 for b in engine.batches)
    assert all(ep.answer == "A" for ep in episodes)


def test_async_and_lockstep_record_the_same_episodes() -> None:
    def records(schedule: str) -> list[tuple]:  # type: ignore[type-arg]
        eps = run(ScriptedEngine(respond), 5, schedule=schedule)
        return [
            (
                ep.key,
                ep.main.token_ids,
                ep.main.loss_mask,
                [s.token_ids for s in ep.subagents],
                [t.to_dict()["calls"] for t in ep.turns],
                ep.forced_answer,
            )
            for ep in eps
        ]

    assert records("async") == records("lockstep")


class FailingServer(TimedServer):
    async def generate(
        self, trajectories: Sequence[Trajectory], sampling: SamplingParams
    ) -> list[Generated]:
        if any(t.role == "subagent" and "Q=e2" in t.messages[1].text for t in trajectories):
            raise RuntimeError("server http://x:1 is gone")
        return await super().generate(trajectories, sampling)


@pytest.mark.parametrize("schedule", ["async", "lockstep"])
def test_an_engine_error_in_one_episode_is_raised_not_hung(schedule: str) -> None:
    with pytest.raises(RuntimeError, match="is gone"):
        asyncio.run(
            asyncio.wait_for(
                run_episodes(tasks(4), FailingServer(respond), AgentConfig(schedule=schedule)), 10
            )
        )
