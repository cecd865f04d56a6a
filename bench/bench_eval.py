"""Evaluation throughput over an OpenAI-compatible server: the rolling pool vs lockstep batches.

`paravt.eval.agent.EvalAgent` (what `ask`, the lmms-eval plugin and `reproduce` run) evaluates N
samples against a fake OpenAI-compatible server (`paravt.core.testing.stand_in.FakeChatServer`, real
HTTP on 127.0.0.1, one thread per request so requests overlap like on a continuously batching
server). Every request's latency is drawn uniformly from 0.5..5 s (a realistic spread for long
video prompts on vLLM/SGLang), deterministically per (sample, turn, call), then multiplied by
TIME_SCALE = 0.25 so the whole bench takes about two minutes: 0.125..1.25 s as measured (at 0.1 the
client's own per-request cost, a few ms of CPU, and a loaded machine's syscall delays weigh 2.5x
more against the latencies than at 0.25; real latencies are 4x longer still). Each sample has
up to 3 main turns; each tool turn makes 0..5 crop_video calls (uniform), and each executed call
gets a sub-agent request (paravt's protocol, `tool_response=subagent`); a turn without calls ends
the sample. Frames come from a static in-memory toolbox (no decoding: this measures scheduling).

Two schedules, same samples and latencies:
- pool: `concurrency=C` samples in flight, a new one starting as soon as one finishes (the default
  over a server);
- lockstep: batches of C samples, each batch advancing turn by turn together (the old behaviour).

Ideal for concurrency C: the zero-overhead makespan of a rolling pool of C slots over the same
samples in the same order (each sample's own critical path: its turns plus the slowest sub-agent of
each turn), from the same latencies. Goal: pool samples/s >= 0.8 x ideal. Also reported: the bound
sum(critical paths) / C, and the lockstep schedule's own ideal.

Writes bench/results/eval.json and prints a table (with the load average).
"""

from __future__ import annotations

import heapq
import json
import multiprocessing
import os
import platform
import random
import re
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from paravt.core import CropVideoArgs, Frame, ToolOutput
from paravt.core.testing.stand_in import FakeChatServer, assistant_turns
from paravt.eval.agent import EvalAgent, VideoQuestion
from paravt.eval.config import EvalConfig

RESULTS = Path(__file__).parent / "results" / "eval.json"
TIME_SCALE = 0.25
LATENCY_S = (0.5, 5.0)
MAX_TURNS, MAX_CALLS = 3, 5
CONCURRENCY = 32
N_SAMPLES = 8 * CONCURRENCY
_SAMPLE = re.compile(r"Sample (\d+):")
_WINDOW = re.compile(r"cropped from (\d+(?:\.\d+)?) s")


def _draw(*key: Any) -> random.Random:
    return random.Random(zlib.crc32(repr(key).encode()))


def latency(sample: int, role: str, turn: int, call: int = 0) -> float:
    """Unscaled seconds of one request."""
    return _draw("latency", sample, role, turn, call).uniform(*LATENCY_S)


def calls_in(sample: int, turn: int) -> int:
    """crop_video calls the main agent makes on `turn` (0-based; the last turn answers)."""
    if turn >= MAX_TURNS - 1:
        return 0
    return _draw("calls", sample, turn).randint(0, MAX_CALLS)


def window(turn: int, call: int) -> tuple[float, float]:
    start = turn * 100 + call * 10 + 1
    return float(start), float(start + 5)


def critical_path(sample: int) -> float:
    """Unscaled seconds of one sample on its own: its turns, each plus its slowest sub-agent."""
    total = 0.0
    for turn in range(MAX_TURNS):
        total += latency(sample, "main", turn)
        n = calls_in(sample, turn)
        if n == 0:
            break
        total += max(latency(sample, "sub", turn, k) for k in range(n))
    return total


def turn_chain(sample: int) -> list[float]:
    """Per turn: the main request plus its slowest sub-agent (unscaled)."""
    out = []
    for turn in range(MAX_TURNS):
        n = calls_in(sample, turn)
        sub = max((latency(sample, "sub", turn, k) for k in range(n)), default=0.0)
        out.append(latency(sample, "main", turn) + sub)
        if n == 0:
            break
    return out


def pool_makespan(paths: list[float], slots: int) -> float:
    """Zero-overhead makespan of a rolling pool: samples start in order on the first free slot."""
    free = [0.0] * slots
    heapq.heapify(free)
    end = 0.0
    for p in paths:
        start = heapq.heappop(free)
        heapq.heappush(free, start + p)
        end = max(end, start + p)
    return end


def lockstep_makespan(samples: list[int], size: int) -> float:
    """Zero-overhead time of lockstep batches: each turn waits for the batch's slowest sample."""
    total = 0.0
    for b in range(0, len(samples), size):
        chains = [turn_chain(s) for s in samples[b : b + size]]
        for turn in range(MAX_TURNS):
            active = [c[turn] for c in chains if len(c) > turn]
            if active:
                total += max(active)
    return total


def reply(body: dict[str, Any]) -> str:
    messages = body["messages"]
    system = messages[0]["content"] if messages[0]["role"] == "system" else ""
    text = json.dumps(messages[-2:] if len(messages) > 1 else messages)
    sample = int(_SAMPLE.search(json.dumps(messages[1]["content"]))[1])  # type: ignore[index]
    if isinstance(system, str) and system.startswith("You are a helper"):
        return "<answer>a cyclist passes</answer>"
    turn = assistant_turns(body)
    n = calls_in(sample, turn)
    if n == 0 or turn >= MAX_TURNS - 1 or "do not call tools" in text.lower():
        return "The rider is clear.</think><answer>B</answer>"
    calls = "".join(
        '<tool_call>{"name": "crop_video", "arguments": '
        f'{{"start_time": {window(turn, k)[0]}, "end_time": {window(turn, k)[1]}}}}}</tool_call>'
        for k in range(n)
    )
    return "Look closer.</think>" + calls


def request_latency(body: dict[str, Any]) -> float:
    messages = body["messages"]
    sample = int(_SAMPLE.search(json.dumps(messages[1]["content"]))[1])  # type: ignore[index]
    system = messages[0]["content"] if messages[0]["role"] == "system" else ""
    if isinstance(system, str) and system.startswith("You are a helper"):
        start = float(_WINDOW.search(system)[1])  # type: ignore[index]
        turn, call = int(start // 100), int((start % 100) // 10)
        return latency(sample, "sub", turn, call) * TIME_SCALE
    return latency(sample, "main", assistant_turns(body)) * TIME_SCALE


IMG = np.zeros((16, 16, 3), dtype=np.uint8)


class Toolbox:
    """Two tiny frames per window, no decoding."""

    async def execute(self, calls: list[CropVideoArgs]) -> list[ToolOutput]:
        return [
            ToolOutput(
                frames=[Frame(IMG, c.start_time), Frame(IMG, c.end_time)],
                window_s=(c.start_time, c.end_time),
            )
            for c in calls
        ]


class Source:
    """Four tiny overview frames and an in-memory toolbox over a 600 s video (no decoding)."""

    def overview(self, video: str, num_frames: int) -> tuple[float, list[Frame]]:
        return 600.0, [Frame(IMG, 150.0 * i) for i in range(num_frames)]

    def toolbox(self, video: str) -> Toolbox:
        return Toolbox()


def _serve(conn: Any) -> None:
    """The fake server in its own process (as a real server is): its threads never compete with
    the client's event loop for the GIL."""
    with FakeChatServer(reply, request_latency, record=False) as server:
        conn.send(server.base_url)
        conn.recv()  # until the parent says stop
        conn.send(server.max_in_flight)


def run(schedule: str) -> dict[str, Any]:
    parent, child = multiprocessing.get_context("fork").Pipe()
    proc = multiprocessing.get_context("fork").Process(target=_serve, args=(child,), daemon=True)
    proc.start()
    base_url = parent.recv()
    try:
        result = _run(schedule, base_url)
    finally:
        parent.send("stop")
        result_in_flight = parent.recv() if parent.poll(10) else None
        proc.join(10)
    result["max_requests_in_flight"] = result_in_flight
    return result


def _run(schedule: str, base_url: str) -> dict[str, Any]:
    config = EvalConfig(
        base_url=base_url,
        model="fake",
        protocol="paravt",  # sub-agent requests, as measured (a served model defaults to paper)
        main_nframes=4,
        concurrency=CONCURRENCY,
        batch_size=CONCURRENCY,
        max_turns=MAX_TURNS,
        max_parallel=MAX_CALLS,
    )
    agent = EvalAgent(config, source=Source())
    samples = [
        VideoQuestion(f"s{i}", "v.mp4", f"Sample {i}: what passes?", options=["a car", "a bike"])
        for i in range(N_SAMPLES)
    ]
    t0 = time.perf_counter()
    if schedule == "pool":
        traces = agent.run(samples)
    else:
        agent.agent_config = agent.agent_config.model_copy(update={"schedule": "lockstep"})
        traces = []
        for b in range(0, len(samples), CONCURRENCY):
            traces += agent._run_batch(samples[b : b + CONCURRENCY])
    elapsed = time.perf_counter() - t0
    errors = [t.error for t in traces if t.error]
    assert not errors, errors[:3]
    assert all(t.answer == "B" for t in traces), [t.response for t in traces[:3]]
    return {
        "seconds": round(elapsed, 3),
        "samples_per_s": round(N_SAMPLES / elapsed, 3),
        "tool_calls": sum(t.num_tool_calls for t in traces),
    }


# ---------------------------------------------------------------------------------------------
# Paper protocol over servers with bounded slots (issue: the released-checkpoint path)
#
# The paper protocol has no sub-agents: a sample is a chain of main requests (tool turns whose
# cropped frames come back into the context, then the answer), one request in flight per sample.
# The stand-in server runs at most `slots` requests at once (a server with that many sequences);
# the pool keeps `slots` samples in flight (samples_per_server), so the zero-overhead ideal is a
# rolling pool of `slots` over the samples' chains. Frames: 64 overview frames of 224x224
# (the driver's 50176-pixel budget), sent as the driver sends them (JPEG, quality 85).

SLOTS = (1, 4, 16)
PAPER_FRAMES = 64
FRAME = np.tile(np.linspace(0, 255, 224, dtype=np.uint8)[None, :, None], (224, 1, 3))


def paper_path(sample: int) -> float:
    """Unscaled seconds of one paper-protocol sample: its main requests, one after another."""
    total = 0.0
    for turn in range(MAX_TURNS):
        total += latency(sample, "main", turn)
        if calls_in(sample, turn) == 0:
            break
    return total


def _sample_of(body: dict[str, Any]) -> int:
    return int(_SAMPLE.search(json.dumps(body["messages"][1]["content"]))[1])  # type: ignore[index]


def paper_reply(body: dict[str, Any]) -> str:
    sample, turn = _sample_of(body), assistant_turns(body)
    n = calls_in(sample, turn)
    if n == 0 or turn >= MAX_TURNS - 1:
        return "<think>The rider is clear.</think><answer>B</answer>"
    calls = "".join(
        '<tool_call>{"name": "crop_video", "arguments": '
        f'{{"start_time": {window(turn, k)[0]}, "end_time": {window(turn, k)[1]}}}}}</tool_call>'
        for k in range(n)
    )
    return "<think>Look closer.</think>" + calls


def paper_latency(body: dict[str, Any]) -> float:
    return latency(_sample_of(body), "main", assistant_turns(body)) * TIME_SCALE


class PaperSource:
    """64 frames of 224x224 per overview, two per crop window (no decoding)."""

    def overview(self, video: str, num_frames: int) -> tuple[float, list[Frame]]:
        return 600.0, [Frame(FRAME, 600.0 * (i + 0.5) / num_frames) for i in range(num_frames)]

    def toolbox(self, video: str) -> Toolbox:
        return PaperToolbox()


class PaperToolbox:
    async def execute(self, calls: list[CropVideoArgs]) -> list[ToolOutput]:
        return [
            ToolOutput(
                frames=[Frame(FRAME, c.start_time), Frame(FRAME, c.end_time)],
                window_s=(c.start_time, c.end_time),
            )
            for c in calls
        ]


def _serve_slots(conn: Any, slots: int) -> None:
    import threading

    gate = threading.Semaphore(slots)

    def reply_in_slot(body: dict[str, Any]) -> str:
        with gate:  # at most `slots` requests are worked on at once; the rest wait their turn
            time.sleep(paper_latency(body))
            return paper_reply(body)

    with FakeChatServer(reply_in_slot, None, record=False) as server:
        conn.send(server.base_url)
        conn.recv()
        conn.send(server.max_in_flight)


def paper_samples(n: int) -> list[VideoQuestion]:
    return [
        VideoQuestion(f"s{i}", "v.mp4", f"Sample {i}: what passes?", options=["a car", "a bike"])
        for i in range(n)
    ]


def run_pool_paper(base_url: str, model: str, in_flight: int, n: int, source: Any) -> dict:
    config = EvalConfig(
        base_url=base_url,
        model=model,
        protocol="paper",
        main_nframes=PAPER_FRAMES,
        samples_per_server=in_flight,
        max_turns=MAX_TURNS,
    )
    agent = EvalAgent(config, source=source)
    t0 = time.perf_counter()
    traces = agent.run(paper_samples(n))
    elapsed = time.perf_counter() - t0
    errors = [t.error for t in traces if t.error]
    return {
        "in_flight": in_flight,
        "samples": n,
        "seconds": round(elapsed, 3),
        "samples_per_s": round(n / elapsed, 3),
        "errored": len(errors),
        "first_error": errors[0] if errors else None,
        "tool_calls": sum(t.num_tool_calls for t in traces),
    }


def slots_bench() -> list[dict[str, Any]]:
    rows = []
    for slots in SLOTS:
        n = 8 * slots
        parent, child = multiprocessing.get_context("fork").Pipe()
        ctx = multiprocessing.get_context("fork")
        proc = ctx.Process(target=_serve_slots, args=(child, slots), daemon=True)
        proc.start()
        base_url = parent.recv()
        try:
            row = run_pool_paper(base_url, "fake", slots, n, PaperSource())
        finally:
            parent.send("stop")
            row["max_requests_in_flight"] = parent.recv() if parent.poll(10) else None
            proc.join(10)
        assert row["errored"] == 0, row["first_error"]
        ideal_s = pool_makespan([paper_path(i) * TIME_SCALE for i in range(n)], slots)
        row["ideal_samples_per_s"] = round(n / ideal_s, 3)
        row["of_ideal"] = round(row["samples_per_s"] * ideal_s / n, 3)
        rows.append(row)
    return rows


def vllm_bench(url: str, model: str) -> list[dict[str, Any]]:
    """The rolling pool against a real server (no ideal: its service times are its own)."""
    rows = []
    for in_flight in SLOTS:
        rows.append(run_pool_paper(url, model, in_flight, max(8, 2 * in_flight), PaperSource()))
    return rows


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--vllm-url",
        help="also measure against this running OpenAI-compatible server (http://host:port/v1), "
        "e.g. vLLM's CPU build on the tiny checkpoint",
    )
    parser.add_argument("--vllm-model", default="tiny", help="the served model name")
    args = parser.parse_args()
    load_start = [round(x, 2) for x in os.getloadavg()]
    slot_rows = slots_bench()
    vllm_rows = vllm_bench(args.vllm_url, args.vllm_model) if args.vllm_url else None
    paths = [critical_path(i) * TIME_SCALE for i in range(N_SAMPLES)]
    ideal_pool_s = pool_makespan(paths, CONCURRENCY)
    bound_s = max(sum(paths) / CONCURRENCY, max(paths))
    ideal_lockstep_s = lockstep_makespan(list(range(N_SAMPLES)), CONCURRENCY) * TIME_SCALE
    measured: dict[str, Any] = {}
    for schedule in ("pool", "lockstep"):
        measured[schedule] = run(schedule)
    ideal_rate = N_SAMPLES / ideal_pool_s
    pool_rate = measured["pool"]["samples_per_s"]
    result = {
        "benchmark": "eval",
        "what": "samples per second of EvalAgent over an OpenAI-compatible server (fake, real "
        "HTTP), rolling pool vs lockstep batches, same samples and latencies",
        "assumptions": {
            "request_latency_s": f"uniform {LATENCY_S[0]}..{LATENCY_S[1]} per request, "
            f"x{TIME_SCALE} time scale (measured: {LATENCY_S[0] * TIME_SCALE:g}.."
            f"{LATENCY_S[1] * TIME_SCALE:g} s)",
            "max_turns": MAX_TURNS,
            "calls_per_tool_turn": f"uniform 0..{MAX_CALLS}, one sub-agent request per call",
            "samples": N_SAMPLES,
            "concurrency": CONCURRENCY,
            "frames": "4 tiny overview frames, static toolbox (no video decoding)",
            "server": (
                "paravt.core.testing.stand_in.FakeChatServer (thread per request) in its own process"
            ),
        },
        "ideal": {
            "pool_makespan_s": round(ideal_pool_s, 3),
            "pool_samples_per_s": round(ideal_rate, 3),
            "bound_sum_paths_over_c_s": round(bound_s, 3),
            "lockstep_makespan_s": round(ideal_lockstep_s, 3),
            "lockstep_samples_per_s": round(N_SAMPLES / ideal_lockstep_s, 3),
        },
        "measured": measured,
        "pool_over_ideal": round(pool_rate / ideal_rate, 3),
        "pool_over_lockstep": round(pool_rate / measured["lockstep"]["samples_per_s"], 3),
        "goal": "pool samples/s >= 0.8 x ideal for the concurrency",
        "met": pool_rate >= 0.8 * ideal_rate,
        "paper_protocol_slots": {
            "what": "protocol=paper (64 overview frames of 224x224 as JPEG q85, no sub-agents), "
            "a stand-in server that works on at most `slots` requests at once, "
            "samples_per_server = slots; ideal = zero-overhead rolling pool of `slots` chains",
            "goal": "samples/s >= 0.9 x ideal at every slot count",
            "rows": slot_rows,
            "met": all(r["of_ideal"] >= 0.9 for r in slot_rows),
        },
        "paper_protocol_vllm": {
            "what": "the same pool against a real server (--vllm-url), 1/4/16 samples in flight",
            "server": args.vllm_url,
            "rows": vllm_rows,
        },
        "load_average_start": load_start,
        "load_average_end": [round(x, 2) for x in os.getloadavg()],
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"eval: {N_SAMPLES} samples, concurrency {CONCURRENCY}, request latency "
        f"{LATENCY_S[0]}..{LATENCY_S[1]} s x{TIME_SCALE:g}"
    )
    print(f"{'schedule':<10}{'seconds':>9}{'samples/s':>11}{'ideal/s':>9}{'of ideal':>10}")
    for schedule, ideal_s in (("pool", ideal_pool_s), ("lockstep", ideal_lockstep_s)):
        m = measured[schedule]
        ideal = N_SAMPLES / ideal_s
        print(
            f"{schedule:<10}{m['seconds']:>9.2f}{m['samples_per_s']:>11.2f}{ideal:>9.2f}"
            f"{m['samples_per_s'] / ideal:>10.2f}"
        )
    print(
        f"pool/ideal {result['pool_over_ideal']:.2f} (goal >= 0.8: "
        f"{'met' if result['met'] else 'NOT met'}), pool/lockstep {result['pool_over_lockstep']:.2f}"
    )
    print("paper protocol, 64 frames, bounded slots on the stand-in:")
    print(f"{'slots':>6}{'samples':>9}{'samples/s':>11}{'ideal/s':>9}{'of ideal':>10}")
    for r in slot_rows:
        print(
            f"{r['in_flight']:>6}{r['samples']:>9}{r['samples_per_s']:>11.2f}"
            f"{r['ideal_samples_per_s']:>9.2f}{r['of_ideal']:>10.2f}"
        )
    if vllm_rows:
        print(f"paper protocol, 64 frames, real server {args.vllm_url}:")
        print(f"{'in flight':>10}{'samples':>9}{'samples/s':>11}{'errored':>9}")
        for r in vllm_rows:
            print(
                f"{r['in_flight']:>10}{r['samples']:>9}{r['samples_per_s']:>11.3f}{r['errored']:>9}"
            )
    print(
        f"load average start {load_start}, end {result['load_average_end']} ({os.cpu_count()} CPUs)"
    )
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
