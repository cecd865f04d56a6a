"""Parser scaling: time of `parse_response` from 1 KB to 1 MB on adversarial inputs.

Writes bench/results/parser.json (with the load average before and after) and prints a table.
Linear time shows as a flat microseconds-per-KB column and a log-log slope near 1.0 (2.0 would be
quadratic); tag spam flattens out once `MAX_TAGS` tags are parsed (slope below 1). Every input
must parse in under 0.1 s per MB.
"""

from __future__ import annotations

import json
import math
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path

from paravt.core import parse_response
from paravt.core.parser import MAX_TAGS

RESULTS = Path(__file__).parent / "results" / "parser.json"
SIZES = [1_000, 10_000, 100_000, 1_000_000]
CALL = (
    '<tool_call>{"name": "crop_video", "arguments": {"start_time": 1, "end_time": 9}}</tool_call>'
)


def repeat_to(unit: str, size: int) -> str:
    return (unit * (size // len(unit) + 1))[:size]


INPUTS: dict[str, Callable[[int], str]] = {
    "unclosed <tool_call> tags": lambda n: repeat_to("<tool_call>", n),
    "unclosed <think> then text": lambda n: "<think>" + repeat_to("a", n - 7),
    "alternating open tags": lambda n: repeat_to("<think><tool_call><answer>", n),
    "stray closing tags": lambda n: repeat_to("</answer></think>", n),
    "'<' characters": lambda n: repeat_to("<", n),
    "near-tags (<thin)": lambda n: repeat_to("<thin<tool_cal<answe", n),
    "valid parallel calls": lambda n: "<think>t</think>" + repeat_to(CALL, n),
    "one huge tool_call body": lambda n: "<tool_call>" + repeat_to("[", n) + "</tool_call>",
    "tool_code nested parens": lambda n: "<tool_code>" + repeat_to("(", n) + "</tool_code>",
}


def best_of(fn: Callable[[], object], budget_s: float = 0.4) -> float:
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < 3 or (time.perf_counter() - start < budget_s and len(times) < 50):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


BUDGET_S_PER_MB = 0.1


def main() -> None:
    load_before = os.getloadavg()
    rows = []
    for name, make in INPUTS.items():
        timings = {}
        for size in SIZES:
            text = make(size)
            timings[size] = best_of(lambda text=text: parse_response(text))
        slope = math.log(timings[SIZES[-1]] / timings[SIZES[1]]) / math.log(SIZES[-1] / SIZES[1])
        rows.append(
            {
                "input": name,
                "seconds": {str(s): t for s, t in timings.items()},
                "us_per_kb": {str(s): t / (s / 1000) * 1e6 for s, t in timings.items()},
                "loglog_slope_10kb_to_1mb": slope,
            }
        )
    worst = max(rows, key=lambda r: r["seconds"][str(SIZES[-1])])
    out = {
        "benchmark": "parser",
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "load_average_1_5_15min": {"before": list(load_before), "after": list(os.getloadavg())},
        "max_tags": MAX_TAGS,
        "sizes_chars": SIZES,
        "rows": rows,
        "max_slope": max(r["loglog_slope_10kb_to_1mb"] for r in rows),
        "worst_seconds_for_1mb": worst["seconds"][str(SIZES[-1])],
        "worst_input": worst["input"],
        "budget_seconds_per_mb": BUDGET_S_PER_MB,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")
    header = f"{'input':30} " + " ".join(f"{s // 1000:>7} KB" for s in SIZES) + "   slope"
    print("parse_response time (ms)")
    print(header)
    for r in rows:
        cells = " ".join(f"{r['seconds'][str(s)] * 1e3:10.3f}" for s in SIZES)
        print(f"{r['input']:30} {cells}   {r['loglog_slope_10kb_to_1mb']:.2f}")
    print(
        f"worst 1 MB: {out['worst_input']} in {out['worst_seconds_for_1mb']:.4f} s "
        f"(budget {BUDGET_S_PER_MB} s); load average {load_before[0]:.2f} -> "
        f"{out['load_average_1_5_15min']['after'][0]:.2f}"
    )
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
