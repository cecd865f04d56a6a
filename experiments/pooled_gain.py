"""Held-out gains of the shipped setting pooled over cells of either harness.

    python experiments/pooled_gain.py experiments/results/evidence_credit_run13/s?-fp32.json
    python experiments/pooled_gain.py experiments/results/learning_bf16_cold_start/s*.json

A cell of `learning_distribution.py` gives its `para_grpo` run at its last evaluated step; a
cell of `evidence_credit.py` its `evidence` run. Prints, per cell and pooled (paired by prompt,
`paravt.train.miniature.pooled_gain`), the accuracy and reward gains over the SFT policy.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from paravt.train.miniature import Evaluation, pooled_gain


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


def main(paths: list[str]) -> None:
    pairs = []
    for path in paths:
        cell = json.loads(Path(path).read_text())
        pair = shipped_pair(cell)
        pairs.append(pair)
        gains = [pooled_gain([pair], k) for k in ("accuracy", "reward")]
        print(f"{Path(path).name}: seed {cell['seed']}, {cell['numeric']}: {gains[0]}; {gains[1]}")
    print(f"pooled over {len(pairs)} cells: " + "; ".join(
        str(pooled_gain(pairs, k)) for k in ("accuracy", "reward")
    ))  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1:])
