"""Do two `paravt-eval reproduce` runs of the same settings write the same tables?

    python experiments/compare_tables.py runs/rep-a/tables.json runs/rep-b/tables.json

Compares every per-seed number of every row (f_tau, kappa, format_ok, leak rate, accuracy per K,
per-document scores, calls, the training curves) and prints how many differ and the largest
difference per field (timings and the setup's load average are left out: they are not results).
Exit status 0 when every number is the same.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SKIP = {"train_seconds", "seconds", "setup"}


def leaves(obj: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k not in SKIP:
                yield from leaves(v, f"{path}/{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from leaves(v, f"{path}[{i}]")
    else:
        yield path, obj


def field_of(path: str) -> str:
    """`/rows/grpo/curves[0]/kappa[3]` -> `curves/kappa` (the row and indices dropped)."""
    parts = [p.split("[")[0] for p in path.strip("/").split("/")]
    return "/".join(p for p in parts[2:] if p) or path


def compare(a: dict[str, Any], b: dict[str, Any]) -> dict[str, dict[str, float]]:
    left, right = dict(leaves(a)), dict(leaves(b))
    out: dict[str, dict[str, float]] = {}
    for path in sorted(set(left) | set(right)):
        x, y = left.get(path), right.get(path)
        field = field_of(path)
        stats = out.setdefault(field, {"values": 0, "differ": 0, "max_abs_diff": 0.0})
        stats["values"] += 1
        same = x == y or (
            isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y)
        )
        if not same:
            stats["differ"] += 1
            if isinstance(x, (int, float)) and isinstance(y, (int, float)):
                stats["max_abs_diff"] = max(stats["max_abs_diff"], abs(x - y))
            else:
                stats["max_abs_diff"] = math.inf
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("a", type=Path)
    ap.add_argument("b", type=Path)
    args = ap.parse_args()
    a = json.loads(args.a.read_text(encoding="utf-8"))
    b = json.loads(args.b.read_text(encoding="utf-8"))
    result = compare(
        {"rows": a["rows"], "seq": a.get("sequential")},
        {"rows": b["rows"], "seq": b.get("sequential")},
    )
    differ = sum(s["differ"] for s in result.values())
    total = sum(s["values"] for s in result.values())
    print(f"{differ} of {total} numbers differ")
    print("| field | numbers | differ | max abs diff |\n|---|---|---|---|")
    for field, s in result.items():
        print(f"| {field} | {s['values']} | {s['differ']} | {s['max_abs_diff']:.4g} |")
    return 0 if differ == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
