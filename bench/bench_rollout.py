"""Rollout throughput: lockstep vs asynchronous episodes on a simulated continuously batching server.

One trainer step of the 8B recipes: 7 prompts x 8 rollouts = 56 episodes, up to 3 turns, up to 5
`crop_video` calls per turn, one sub-agent per successful call. As in training, each of the 7
trainer ranks runs `paravt.core.run_episodes` on its own prompt's 8 episodes, all ranks at once
against one shared server, and the step ends when the last rank is done; with
`schedule="lockstep"` every turn of a rank waits for the slowest generation of its 8 episodes,
with `schedule="async"` each episode moves on its own. (A row with all 56 episodes in one runtime
is reported too.) Same seeds, so both schedules see exactly the
same generation lengths, call counts and decode times.

The simulated server (NOT measured on a GPU; assumptions stated in ASSUMPTIONS and in the JSON):
a request takes prefill + n_tokens x t_token, with t_token = 15 ms + 0.15 ms per request open at
its start (continuous batching slows each sequence a little as the batch grows; ~25 ms/token at 64
open requests, the order of Qwen3-VL-8B bf16 on one H100 under SGLang). Main-turn lengths are
lognormal (median 350 tokens, sigma 0.8, 20..2048: a long tail that hits the recipe's
max_new_tokens), sub-agent lengths lognormal (median 120, sigma 0.6, 10..512), crop decodes
lognormal (median 0.6 s, sigma 0.5). All times are scaled by TIME_SCALE (1/50) so a run takes
seconds; the ratio does not depend on the scale.

Then whole training runs (STEPS steps, the 7 ranks as threads): every step the ranks meet (the
update is collective), train for TRAIN_S, rank 0 pushes the weights for PUSH_S with the server
paused (requests in flight make no progress meanwhile), and the ranks meet again. Synchronous
modes generate a step only after the previous push; `max_staleness` N runs each rank's rollouts
on `paravt.train.producer.RolloutProducer` (the trainer's own class), so step s generates while
steps s-N..s-1 train, on weights up to N versions old (the reference trains with N = 2). Twice:
rollouts only (TRAIN_S = PUSH_S = 0: what the rollout side can deliver) and with 60 s training +
10 s push per step (a guess for 8B on 7 GPUs; the reference reports ~250 s per step in all).

Writes bench/results/rollout.json and prints a table (with the load average).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import platform
import random
import statistics
import threading
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
from paravt.train.producer import RolloutProducer

RESULTS = Path(__file__).parent / "results" / "rollout.json"
PROMPTS, GROUP, MAX_TURNS, MAX_CALLS = 7, 8, 3, 5
TIME_SCALE = 1 / 50
SEEDS = (0, 1, 2)
ASSUMPTIONS = {
    "episodes_per_step": PROMPTS * GROUP,
    "max_turns": MAX_TURNS,
    "max_calls_per_turn": MAX_CALLS,
    "t_token_s": "0.015 + 0.00015 * open_requests (per sequence, continuous batching)",
    "prefill_s": {"main": 0.2, "subagent": 0.1},
    "main_tokens": "lognormal(median 350, sigma 0.8 headline; 0.5 and 1.1 as spread variants) "
    "clipped to 20..2048",
    "subagent_tokens": "lognormal(median 120, sigma 0.6) clipped to 10..512",
    "calls_per_tool_turn": {"0": 0.15, "1": 0.15, "2": 0.25, "3": 0.2, "4": 0.15, "5": 0.1},
    "crop_decode_s": "lognormal(median 0.6, sigma 0.5) per turn's calls",
    "time_scale": TIME_SCALE,
    "server": "simulated in-process (asyncio), not a real SGLang server",
}


def _lognormal(rng: random.Random, median: float, sigma: float, lo: float, hi: float) -> float:
    return min(max(median * math.exp(rng.gauss(0.0, sigma)), lo), hi)


def _call(i: int) -> str:
    args = {"start_time": 10 * i, "end_time": 10 * i + 8}
    return "<tool_call>" + json.dumps({"name": "crop_video", "arguments": args}) + "</tool_call>"


@dataclass
class Plan:
    """What one (episode, turn) or sub-agent does, drawn once per seed; `sigma` is the spread of
    main-turn lengths (lognormal)."""

    seed: int
    sigma: float = 0.8

    def rng(self, *key: object) -> random.Random:
        return random.Random(zlib.crc32(repr((self.seed, *key)).encode()))

    def main_turn(self, episode: str, turn: int) -> tuple[str, int]:
        rng = self.rng("main", episode, turn)
        n = int(_lognormal(rng, 350, self.sigma, 20, 2048))
        calls = 0
        if turn < MAX_TURNS:
            weights = [float(w) for w in ASSUMPTIONS["calls_per_tool_turn"].values()]  # type: ignore[union-attr]
            calls = rng.choices(range(MAX_CALLS + 1), weights)[0]
        body = "".join(_call(i) for i in range(calls)) if calls else "<answer>A</answer>"
        pad = max(n - len(body) - len("</think>") - 1, 1)
        return "x" * pad + "</think>" + body + END_OF_TURN, n

    def subagent(self, episode: str, turn: int, call: int) -> str:
        n = int(_lognormal(self.rng("sub", episode, turn, call), 120, 0.6, 10, 512))
        return "<answer>" + "s" * max(n - 18, 1) + "</answer>" + END_OF_TURN

    def decode_s(self, episode: str, turn: int) -> float:
        return _lognormal(self.rng("decode", episode, turn), 0.6, 0.5, 0.05, 10.0)


def _episode_of(traj: Trajectory) -> str:
    return traj.messages[1].text.split("Q=")[-1].split()[0]


@dataclass
class SimServer(ScriptedEngine):
    """A continuously batching server: every trajectory of a call runs concurrently, each takes
    prefill + n x t_token; a call returns when its last trajectory finishes. Tokenizes like
    `ScriptedEngine` (one token per character)."""

    plan: Plan = field(default_factory=lambda: Plan(0))
    continuous_batching: bool = True
    open_requests: int = 0
    requests: int = 0
    tokens: int = 0
    calls: list[int] = field(default_factory=list)
    # weight loads: (start, end) in perf_counter seconds; running requests make no progress then
    pauses: list[tuple[float, float]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def pause_for(self, seconds: float) -> None:
        """A weight load of `seconds` (scaled) with generation paused, as rank 0's push."""
        now = time.perf_counter()
        with self.lock:
            self.pauses.append((now, now + seconds))
        time.sleep(seconds)

    def _paused_within(self, start: float, end: float) -> float:
        with self.lock:
            return sum(max(0.0, min(b, end) - max(a, start)) for a, b in self.pauses)

    async def _one(self, traj: Trajectory) -> Generated:
        episode = _episode_of(traj)
        if traj.role == "main":
            turn = 1 + sum(1 for m in traj.messages if m.role == "assistant")
            text, _ = self.plan.main_turn(episode, turn)
            prefill = 0.2
        else:
            text = self.plan.subagent(episode, traj.turn or 0, traj.call_index or 0)
            prefill = 0.1
        with self.lock:
            self.open_requests += 1
            t_token = 0.015 + 0.00015 * self.open_requests
        started = time.perf_counter()
        try:
            await asyncio.sleep((prefill + len(text) * t_token) * TIME_SCALE)
            credited = 0.0  # time spent paused (a weight load) is added on
            while (paused := self._paused_within(started, time.perf_counter())) > credited:
                await asyncio.sleep(paused - credited)
                credited = paused
        finally:
            with self.lock:
                self.open_requests -= 1
        ids = [ord(c) for c in text]
        with self.lock:
            self.requests += 1
            self.tokens += len(ids)
        return Generated(text, ids, [-0.5] * len(ids), "stop")

    async def generate(
        self, trajectories: Sequence[Trajectory], sampling: SamplingParams
    ) -> list[Generated]:
        with self.lock:
            self.calls.append(len(trajectories))
        return list(await asyncio.gather(*(self._one(t) for t in trajectories)))


@dataclass
class SimToolbox(StaticToolbox):
    """`StaticToolbox` whose decodes take the plan's time."""

    plan: Plan | None = None
    episode: str = ""

    async def execute(self, calls: Sequence[CropVideoArgs]) -> list[ToolOutput]:
        assert self.plan is not None
        turn = len(self.calls) + 1
        await asyncio.sleep(self.plan.decode_s(self.episode, turn) * TIME_SCALE)
        return await super().execute(calls)


def critical_path_s(plan: Plan) -> float:
    """The slowest episode's own chain (its generations at one open request, its decodes, its
    slowest sub-agent per turn), unscaled: no schedule can finish the step sooner."""
    t_token = 0.015 + 0.00015
    worst = 0.0
    for p in range(PROMPTS):
        for g in range(GROUP):
            key, total = f"p{p}g{g}", 0.0
            for turn in range(1, MAX_TURNS + 1):
                text, _ = plan.main_turn(key, turn)
                total += 0.2 + len(text) * t_token
                calls = text.count("<tool_call>")
                if not calls:
                    break
                total += plan.decode_s(key, turn)
                total += max(0.1 + len(plan.subagent(key, turn, i)) * t_token for i in range(calls))
            worst = max(worst, total)
    return worst


def tasks(plan: Plan, prompts: Sequence[int] = range(PROMPTS), step: int = 0) -> list[AgentTask]:
    out = []
    for p in prompts:
        for g in range(GROUP):
            key = f"s{step}p{p}g{g}" if step else f"p{p}g{g}"
            question = f"Q={key} what happens?"
            msgs = build_main_prompt(question, [Frame("ov", 5.0)], duration_s=60.0)
            box = SimToolbox(duration_s=60.0, plan=plan, episode=key)
            out.append(AgentTask(key, msgs, box, question))
    return out


def agent_config(schedule: str) -> AgentConfig:
    """The 8B recipes' agent settings, with `schedule`."""
    return AgentConfig(
        max_turns=MAX_TURNS,
        max_parallel=MAX_CALLS,
        schedule=schedule,  # type: ignore[arg-type]
        sampling=SamplingParams(max_new_tokens=4096),
        subagent_sampling=SamplingParams(max_new_tokens=1024),
    )


def one_run(schedule: str, seed: int, sigma: float, ranks: int = PROMPTS) -> dict[str, float]:
    """One trainer step: `ranks` runtimes (one per trainer rank, each with its share of the
    episodes, all running at once) against one shared server; the step ends with the last rank."""
    plan = Plan(seed, sigma)
    server = SimServer(lambda t: "", plan=plan)
    config = agent_config(schedule)
    everything = tasks(plan)
    share = len(everything) // ranks
    groups = [everything[r * share : (r + 1) * share] for r in range(ranks)]

    async def step() -> list[Any]:
        per_rank = await asyncio.gather(*(run_episodes(g, server, config) for g in groups))
        return [ep for eps in per_rank for ep in eps]

    t0 = time.perf_counter()
    episodes = asyncio.run(step())
    wall = time.perf_counter() - t0
    return {
        "wall_s": wall,
        "episodes_per_s": len(episodes) / wall,
        "episodes_per_s_unscaled": len(episodes) / (wall / TIME_SCALE),
        "requests": server.requests,
        "engine_calls": len(server.calls),
        "generated_tokens": server.tokens,
        "subagents": sum(len(e.subagents) for e in episodes),
        "tool_calls": sum(e.num_tool_calls for e in episodes),
        "critical_path_s_unscaled": critical_path_s(plan),
    }


SPREADS = {"headline (sigma 0.8)": 0.8, "narrow (sigma 0.5)": 0.5, "wide (sigma 1.1)": 1.1}


def measure(sigma: float, ranks: int = PROMPTS) -> dict[str, object]:
    """Both schedules over SEEDS at one spread of main-turn lengths."""
    runs: dict[str, list[dict[str, float]]] = {"lockstep": [], "async": []}
    for seed in SEEDS:
        for schedule in runs:
            runs[schedule].append(one_run(schedule, seed, sigma, ranks))
    for a, b in zip(runs["lockstep"], runs["async"]):  # same work on both sides
        assert a["generated_tokens"] == b["generated_tokens"] and a["subagents"] == b["subagents"]
    ratios = [
        b["episodes_per_s"] / a["episodes_per_s"] for a, b in zip(runs["lockstep"], runs["async"])
    ]
    summary = {
        s: {
            "episodes_per_s_mean": statistics.mean(r["episodes_per_s"] for r in rs),
            "episodes_per_s_unscaled_mean": statistics.mean(
                r["episodes_per_s_unscaled"] for r in rs
            ),
            "step_s_unscaled_mean": statistics.mean(r["wall_s"] / TIME_SCALE for r in rs),
        }
        for s, rs in runs.items()
    }
    return {
        "sigma_main_tokens": sigma,
        "trainer_ranks": ranks,
        "episodes_per_rank": PROMPTS * GROUP // ranks,
        "runs": runs,
        "summary": summary,
        "critical_path_s_unscaled_mean": statistics.mean(
            r["critical_path_s_unscaled"] for r in runs["async"]
        ),
        "ceiling_lockstep_over_bound": statistics.mean(
            (a["wall_s"] / TIME_SCALE) / a["critical_path_s_unscaled"] for a in runs["lockstep"]
        ),
        "ratio_async_over_lockstep": {
            "per_seed": ratios,
            "mean": statistics.mean(ratios),
            "min": min(ratios),
        },
    }


# Training, as the trainer runs it: every step the 7 ranks meet (the update is collective), train
# for TRAIN_S, rank 0 pushes the weights for SYNC_S (the servers paused), all meet again.
STEPS = 8  # enough that filling and draining the pipeline do not dominate
TRAINING = {
    "rollouts only (train 0 s, push 0 s)": (0.0, 0.0),
    "train 60 s + push 10 s": (60.0, 10.0),
}
MODES = {  # name: (episode schedule, max_staleness)
    "lockstep, synchronous": ("lockstep", 0),
    "async episodes, synchronous": ("async", 0),
    "async episodes, max_staleness 1": ("async", 1),
    "async episodes, max_staleness 2 (reference)": ("async", 2),
}


def run_threads(threads: list[threading.Thread]) -> float:
    """Start every thread, wait for all; the wall seconds they took."""
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0


def training_run(
    schedule: str, max_staleness: int, seed: int, train_s: float, sync_s: float
) -> dict[str, float]:
    """STEPS trainer steps on PROMPTS rank threads against one simulated server; synchronous
    ranks generate each step after the previous push, the others through `RolloutProducer`."""
    plan = Plan(seed, 0.8)
    server = SimServer(lambda t: "", plan=plan)
    config = agent_config(schedule)
    meet = threading.Barrier(PROMPTS)
    staleness: list[int] = []
    errors: list[BaseException] = []

    def train_and_push(rank: int) -> None:
        meet.wait()
        time.sleep(train_s * TIME_SCALE)
        if rank == 0:
            server.pause_for(sync_s * TIME_SCALE)
        meet.wait()

    def rank_loop(rank: int) -> None:
        try:
            if not max_staleness:
                for step in range(1, STEPS + 1):
                    asyncio.run(run_episodes(tasks(plan, [rank], step), server, config))
                    train_and_push(rank)
                return
            with RolloutProducer(
                lambda step: tasks(plan, [rank], step),
                lambda ts: run_episodes(ts, server, config),
                first=1,
                last=STEPS,
                max_staleness=max_staleness,
                version=0,
            ) as producer:
                for step in range(1, STEPS + 1):
                    got = producer.take(step)
                    staleness.append(got.staleness)
                    train_and_push(rank)
                    producer.set_version(step)
        except BaseException as exc:  # reported by the caller
            errors.append(exc)
            meet.abort()

    wall = run_threads([threading.Thread(target=rank_loop, args=(r,)) for r in range(PROMPTS)])
    if errors:
        raise errors[0]
    episodes = PROMPTS * GROUP * STEPS
    return {
        "wall_s_unscaled": wall / TIME_SCALE,
        "step_s_unscaled": wall / TIME_SCALE / STEPS,
        "episodes_per_s_unscaled": episodes / (wall / TIME_SCALE),
        "generated_tokens": server.tokens,
        "requests": server.requests,
        "staleness_mean": statistics.mean(staleness) if staleness else 0.0,
        "staleness_max": max(staleness) if staleness else 0,
    }


def measure_training(train_s: float, sync_s: float) -> dict[str, object]:
    runs = {
        name: [training_run(sched, eta, seed, train_s, sync_s) for seed in SEEDS]
        for name, (sched, eta) in MODES.items()
    }
    base = runs["lockstep, synchronous"]
    for rs in runs.values():  # the same episodes in every mode
        assert [r["generated_tokens"] for r in rs] == [r["generated_tokens"] for r in base]
    out: dict[str, object] = {"train_s": train_s, "push_s": sync_s, "steps": STEPS, "modes": {}}
    for name, rs in runs.items():
        ratios = [
            r["episodes_per_s_unscaled"] / b["episodes_per_s_unscaled"] for r, b in zip(rs, base)
        ]
        out["modes"][name] = {  # type: ignore[index]
            "runs": rs,
            "step_s_unscaled_mean": statistics.mean(r["step_s_unscaled"] for r in rs),
            "episodes_per_s_unscaled_mean": statistics.mean(
                r["episodes_per_s_unscaled"] for r in rs
            ),
            "staleness_mean": statistics.mean(r["staleness_mean"] for r in rs),
            "ratio_over_lockstep": {
                "per_seed": ratios,
                "mean": statistics.mean(ratios),
                "min": min(ratios),
            },
        }
    return out


def main() -> None:
    load_start = os.getloadavg()
    spreads = {name: measure(sigma) for name, sigma in SPREADS.items()}
    one_runtime = measure(0.8, ranks=1)
    training = {name: measure_training(*ts) for name, ts in TRAINING.items()}
    headline_training = training["rollouts only (train 0 s, push 0 s)"]["modes"][  # type: ignore[index]
        "async episodes, max_staleness 2 (reference)"
    ]
    result = {
        "benchmark": "rollout",
        "what": "episodes per second of 8B-recipe training (7 trainer ranks x 1 prompt x 8 "
        "rollouts per step) on a simulated continuously batching server: lockstep episodes and "
        "synchronous steps vs asynchronous episodes and rollouts running ahead of training",
        "assumptions": {
            **ASSUMPTIONS,
            "training": "per step: all ranks meet, train TRAIN_S, rank 0 pushes for PUSH_S with "
            "the server paused (requests in flight make no progress), all meet again; "
            f"{STEPS} steps per run",
        },
        "seeds": list(SEEDS),
        "headline": "async episodes, max_staleness 2 (reference) vs lockstep, synchronous; "
        "rollouts only (see training for 60 s train + 10 s push per step)",
        "ratio_async_over_lockstep": headline_training["ratio_over_lockstep"],
        "per_step_headline": next(iter(spreads)),
        "per_step_ratio_async_episodes_over_lockstep": next(iter(spreads.values()))[
            "ratio_async_over_lockstep"
        ],
        "training": training,
        "spreads": spreads,
        "one_runtime_for_all_56_episodes": one_runtime,
        "goal": "async >= 2x lockstep",
        "load_average_start": load_start,
        "load_average_end": os.getloadavg(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"rollout: {PROMPTS} trainer ranks x {GROUP} episodes per step, one simulated server, "
        f"time x{TIME_SCALE:g}"
    )
    print(
        f"{'main-turn length spread':<24}{'lockstep step s':>16}{'async step s':>14}"
        f"{'bound s':>9}{'async/lockstep':>22}{'ceiling':>9}"
    )
    rows = {**spreads, "all 56 in one runtime": one_runtime}
    for name, m in rows.items():
        summ, ratio = m["summary"], m["ratio_async_over_lockstep"]  # type: ignore[index]
        print(
            f"{name:<24}{summ['lockstep']['step_s_unscaled_mean']:>16.1f}"  # type: ignore[index]
            f"{summ['async']['step_s_unscaled_mean']:>14.1f}"  # type: ignore[index]
            f"{m['critical_path_s_unscaled_mean']:>9.1f}"
            f"{ratio['mean']:>16.2f}x (min {ratio['min']:.2f})"  # type: ignore[index]
            f"{m['ceiling_lockstep_over_bound']:>8.2f}x"
        )
    print(
        "(unscaled seconds; bound = the slowest episode's own chain at an idle server: no schedule "
        "finishes sooner, so lockstep / bound is the most any schedule could gain)"
    )
    print()
    print(f"training, {STEPS} steps (unscaled s per step; episodes/s over lockstep, synchronous)")
    print(f"{'mode':<46}" + "".join(f"{name:>40}" for name in TRAINING))
    for mode in MODES:
        cells = []
        for t in training.values():
            m = t["modes"][mode]  # type: ignore[index]
            r = m["ratio_over_lockstep"]
            cells.append(
                f"{m['step_s_unscaled_mean']:>8.1f} s/step  {r['mean']:>5.2f}x (min {r['min']:.2f})"
                f" st {m['staleness_mean']:.1f}"
            )
        print(f"{mode:<46}" + "".join(f"{c:>40}" for c in cells))
    print("(st: mean staleness, weight versions between a step's rollouts and its update)")
    print(f"load average start {load_start}, end {os.getloadavg()} ({os.cpu_count()} CPUs)")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
