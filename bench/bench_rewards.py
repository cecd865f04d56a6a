"""Reward throughput: completions scored per second per core (PARA-GRPO preset), and scaling to 1 MB.

A realistic mix of rollouts (think + parallel calls + answer, direct answers, broken formats,
grounding, open-ended, chat spam) is scored single-threaded; the figure is per core. Then one
completion of 0.25, 0.5 and 1 MB is scored: a flat microseconds-per-KB column (log-log slope near
1.0) shows linear time. Writes bench/results/rewards.json and prints a table.
"""

from __future__ import annotations

import json
import math
import platform
import random
import time
from pathlib import Path

from paravt.rewards import RewardConfig, score

RESULTS = Path(__file__).parent / "results" / "rewards.json"
CONFIG = RewardConfig.paragrpo()
THINK = (
    "<think>The overview shows a kitchen; the question asks what happens after the kettle boils, "
    "which the 64 frames only hint at around the 9-minute mark, so I will crop three windows.</think>"
)


def call(start: int, end: int) -> str:
    return (
        f'<tool_call>{{"name": "crop_video", "arguments": {{"start_time": {start}, '
        f'"end_time": {end}}}}}</tool_call>'
    )


def mix(n: int, seed: int = 0) -> list[tuple[str, str, str]]:
    """(completion, ground truth, question type) rollouts in realistic proportions."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        k = rng.random()
        letter = rng.choice("ABCD")
        if k < 0.35:  # parallel calls, tool responses, MCQ answer
            calls = "".join(
                call(s, s + 30) for s in rng.sample(range(0, 600, 30), rng.randint(1, 5))
            )
            resp = "<tool_response>The person pours water into a cup at 552 s.</tool_response>"
            out.append(
                (THINK + calls + resp + f"<answer>{rng.choice('ABCD')}</answer>", letter, "mcq")
            )
        elif k < 0.6:  # direct answer
            out.append(
                (THINK + f"<answer>The answer is {rng.choice('ABCD')}</answer>", letter, "mcq")
            )
        elif k < 0.7:  # temporal grounding
            s = rng.randint(0, 500)
            out.append((THINK + f"<answer>[{s}, {s + 20}]</answer>", f"[{s + 5}, {s + 30}]", "tvg"))
        elif k < 0.8:  # open-ended
            out.append(
                (
                    THINK + "<answer>she pours the water into a red cup</answer>",
                    "pouring water into a cup",
                    "oe",
                )
            )
        elif k < 0.92:  # collapsed format: unclosed think, malformed call
            out.append(("<think>" + THINK[7:-8] + ' <tool_call>{"name": crop_video', letter, "mcq"))
        else:  # chat-token spam
            out.append(("<|im_start|>assistant\n" * 6, letter, "mcq"))
    return out


def throughput(samples: list[tuple[str, str, str]], budget_s: float = 3.0) -> dict[str, float]:
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < budget_s:
        for text, truth, qtype in samples:
            score(text, truth, qtype, CONFIG)
        done += len(samples)
    elapsed = time.perf_counter() - start
    chars = sum(len(t) for t, _, _ in samples) / len(samples)
    return {
        "completions": done,
        "seconds": elapsed,
        "per_second_per_core": done / elapsed,
        "mean_chars": chars,
    }


def _fill(unit: str, size: int) -> str:
    return (unit * (size // len(unit) + 1))[:size]


KINDS = {
    "long think": lambda n: (
        "<think>" + _fill(THINK[7:-8] + " ", n) + "</think>" + call(1, 9) + "<answer>B</answer>"
    ),
    "long answer (F1)": lambda n: THINK + "<answer>" + _fill("she pours water ", n) + "</answer>",
    "parallel calls": lambda n: THINK + _fill(call(10, 40), n) + "<answer>B</answer>",
    "tag soup": lambda n: _fill("<think><tool_call></answer><|im_start|>", n),
}
QTYPE = {"long answer (F1)": ("pouring water into a cup", "oe")}


def scaling() -> list[dict[str, float | str]]:
    rows: list[dict[str, float | str]] = []
    for kind, make in KINDS.items():
        truth, qtype = QTYPE.get(kind, ("B", "mcq"))
        for size in (250_000, 500_000, 1_000_000):
            text = make(size)
            best = min(_timed(text, truth, qtype) for _ in range(3))
            rows.append(
                {
                    "input": kind,
                    "bytes": len(text),
                    "seconds": best,
                    "us_per_kb": best * 1e6 / (len(text) / 1e3),
                }
            )
    return rows


def _timed(text: str, truth: str, qtype: str) -> float:
    t0 = time.perf_counter()
    score(text, truth, qtype, CONFIG)
    return time.perf_counter() - t0


def main() -> None:
    samples = mix(500)
    tp = throughput(samples)
    rows = scaling()
    slopes = {}
    for kind in KINDS:
        mine = [r for r in rows if r["input"] == kind]
        a, b = mine[0], mine[-1]
        slopes[kind] = math.log(float(b["seconds"]) / float(a["seconds"])) / math.log(
            float(b["bytes"]) / float(a["bytes"])
        )
    result = {
        "preset": "paragrpo",
        "machine": {"python": platform.python_version(), "processor": platform.processor()},
        "throughput": tp,
        "scaling": rows,
        "loglog_slope": slopes,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"rewards scored per second per core (paragrpo, mixed rollouts of "
        f"{tp['mean_chars']:.0f} chars): {tp['per_second_per_core']:,.0f}"
    )
    print(f"{'input':<18} {'size':>8} {'seconds':>9} {'us/KB':>8}")
    for r in rows:
        print(
            f"{r['input']:<18} {float(r['bytes']) / 1e6:>6.2f}MB {float(r['seconds']):>9.4f} "
            f"{float(r['us_per_kb']):>8.1f}"
        )
    for kind, slope in slopes.items():
        print(f"log-log slope, {kind}: {slope:.2f} (1.0 = linear, 2.0 = quadratic)")


if __name__ == "__main__":
    main()
