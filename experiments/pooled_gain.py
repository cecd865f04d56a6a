"""Held-out gains of the shipped setting pooled over cells of either harness.

    python experiments/pooled_gain.py experiments/results/evidence_credit_run13/s?-fp32.json
    python experiments/pooled_gain.py experiments/results/learning_bf16_cold_start/s*.json
    python experiments/pooled_gain.py --pairs FILES   # the learning test's verdict on every pair

A cell of `learning_distribution.py` gives its `para_grpo` run at its last evaluated step; a
cell of `evidence_credit.py` its `evidence` run. Prints, per cell and pooled (paired by prompt,
`paravt.train.miniature.pooled_gain`), the accuracy and reward gains over the SFT policy.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from paravt.train.miniature import (
    ACCURACY_MARGIN,
    ACCURACY_Z,
    REWARD_MARGIN,
    REWARD_Z,
    Evaluation,
    learned,
    pooled_gain,
)


def shipped_pair(cell: dict[str, Any]) -> tuple[Evaluation, Evaluation]:
    """(the SFT policy, the shipped setting after RL) of one cell of either harness."""

    def ev(d: dict[str, Any]) -> Evaluation:
        return Evaluation(d["metrics"], d["per_prompt"])

    if "para_grpo" in cell:  # learning_distribution.py
        last = max(cell["para_grpo"], key=int)
        return ev(cell["before"]), ev(cell["para_grpo"][last])
    return ev(cell["before"]["evidence"]), ev(
        cell["runs"]["evidence"]["after"]
    )  # evidence_credit.py


def judge_pairs(cells: dict[int, tuple[Evaluation, Evaluation]]) -> None:
    """The learning test's verdict (`miniature.learned`, two seeds pooled) on every pair of
    `cells` (seed -> its pair), and which of its four criteria each failing pair misses."""
    seeds = sorted(cells)
    verdicts = []
    for i, a in enumerate(seeds):
        for b in seeds[i + 1 :]:
            g = {k: pooled_gain([cells[a], cells[b]], k) for k in ("accuracy", "reward")}
            verdicts.append((a, b, g, learned(g)))
    misses = {
        f"accuracy < +{ACCURACY_MARGIN:g}": lambda g: g["accuracy"].mean < ACCURACY_MARGIN,
        f"accuracy < {ACCURACY_Z:g} SE": lambda g: g["accuracy"].z < ACCURACY_Z,
        f"reward < +{REWARD_MARGIN:g}": lambda g: g["reward"].mean < REWARD_MARGIN,
        f"reward < {REWARD_Z:g} SE": lambda g: g["reward"].z < REWARD_Z,
    }
    print(
        f"pairs passing the learning test's verdict: {sum(v[3] for v in verdicts)} of {len(verdicts)}"
    )
    for name, miss in misses.items():
        print(f"  missing {name}: {sum(miss(v[2]) for v in verdicts)}")
    print("  failing pairs: " + ", ".join(f"{a}+{b}" for a, b, _, ok in verdicts if not ok))
    # the 10th percentile over the pairs (index n // 10 of the sorted values, no interpolation):
    # the learning test's thresholds are read from it
    for key, what in (("accuracy", "mean"), ("accuracy", "z"), ("reward", "mean"), ("reward", "z")):
        values = sorted(getattr(v[2][key], what) for v in verdicts)
        print(f"  10th percentile of the pairs' {key} {what}: {values[len(values) // 10]:+.3f}")


def main(paths: list[str]) -> None:
    judge = paths[:1] == ["--pairs"]
    paths = paths[1:] if judge else paths
    pairs = []
    by_seed = {}
    for path in paths:
        cell = json.loads(Path(path).read_text())
        pair = shipped_pair(cell)
        pairs.append(pair)
        by_seed[cell["seed"]] = pair
        gains = [pooled_gain([pair], k) for k in ("accuracy", "reward")]
        print(f"{Path(path).name}: seed {cell['seed']}, {cell['numeric']}: {gains[0]}; {gains[1]}")
    print(f"pooled over {len(pairs)} cells: " + "; ".join(
        str(pooled_gain(pairs, k)) for k in ("accuracy", "reward")
    ))  # fmt: skip
    if judge:
        if len(by_seed) != len(pairs):
            raise SystemExit("--pairs: give one cell per seed (one numeric, one setting)")
        judge_pairs(by_seed)


if __name__ == "__main__":
    main(sys.argv[1:])
