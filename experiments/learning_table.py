"""The learning test's measured distribution as tables, from `learning_distribution.py` cells.

    python experiments/learning_table.py runs/learning/*.json > experiments/results/learning_distribution.md

Per cell (seed x threads x CPU kernels): the SFT policy's held-out accuracy and reward, and the
paired gains after PARA-GRPO at each evaluated step and after each control. Per setting (threads x
kernels): the test's verdict (`paravt.train.miniature.learned`) on the test's seeds pooled, for
PARA-GRPO and each control.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from paravt.train.miniature import (
    ACCURACY_MARGIN,
    ACCURACY_Z,
    LEARNING_RL_STEPS,
    LEARNING_SEEDS,
    REWARD_MARGIN,
    REWARD_Z,
    Evaluation,
    learned,
    pooled_gain,
)

RUNS = ("para_grpo", "lr0", "sign", "mask")


def ev(d: dict[str, Any]) -> Evaluation:
    return Evaluation(d["metrics"], d["per_prompt"])


def gain_cell(before: Evaluation, after: Evaluation) -> str:
    a = pooled_gain([(before, after)], "accuracy")
    r = pooled_gain([(before, after)], "reward")
    return f"{a.mean:+.3f} ({a.z:+.1f}) / {r.mean:+.3f} ({r.z:+.1f})"


def main(paths: list[str]) -> None:
    cells = [json.loads(Path(p).read_text()) for p in paths]
    cells.sort(key=lambda c: (c["threads"], c["capability"], c["seed"]))
    steps = sorted({int(s) for c in cells for s in c["para_grpo"]})
    print(
        "## Per cell: gain in accuracy (SE) / gain in reward (SE), paired over 32 held-out prompts x 8 rollouts\n"
    )
    head = ["threads", "kernels", "seed", "SFT acc / reward"]
    head += [f"PARA-GRPO @{s}" for s in steps]
    head += [f"{r} @{LEARNING_RL_STEPS}" for r in RUNS[1:]]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for c in cells:
        b = ev(c["before"])
        row = [str(c["threads"]), c["capability"].lower(), str(c["seed"])]
        row.append(f"{b.metrics['accuracy']:.3f} / {b.metrics['reward/total']:.3f}")
        row += [
            gain_cell(b, ev(c["para_grpo"][str(s)])) if str(s) in c["para_grpo"] else "-"
            for s in steps
        ]
        for r in RUNS[1:]:
            d = c.get(r, {}).get(str(LEARNING_RL_STEPS))
            row.append(gain_cell(b, ev(d)) if d else "-")
        print("| " + " | ".join(row) + " |")

    print(
        f"\n## The test's verdict per setting: seeds {list(LEARNING_SEEDS)} pooled, "
        f"{LEARNING_RL_STEPS} RL steps; learned = accuracy >= +{ACCURACY_MARGIN} and >= "
        f"{ACCURACY_Z:g} SE, reward >= +{REWARD_MARGIN} and >= {REWARD_Z:g} SE\n"
    )
    by_setting: dict[tuple[int, str], dict[int, dict[str, Any]]] = defaultdict(dict)
    for c in cells:
        by_setting[(c["threads"], c["capability"].lower())][c["seed"]] = c
    head = ["threads", "kernels"] + [f"{r}: acc / reward gain (SE), verdict" for r in RUNS]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for (threads, cap), seeds in sorted(by_setting.items()):
        if not all(s in seeds for s in LEARNING_SEEDS):
            continue
        row = [str(threads), cap]
        for r in RUNS:
            pairs = []
            for s in LEARNING_SEEDS:
                d = seeds[s].get(r, {}).get(str(LEARNING_RL_STEPS))
                if d:
                    pairs.append((ev(seeds[s]["before"]), ev(d)))
            if len(pairs) < len(LEARNING_SEEDS):
                row.append("-")
                continue
            gains = {k: pooled_gain(pairs, k) for k in ("accuracy", "reward")}
            a, g = gains["accuracy"], gains["reward"]
            verdict = "**learned**" if learned(gains) else "not learned"
            row.append(f"{a.mean:+.3f} ({a.z:+.1f}) / {g.mean:+.3f} ({g.z:+.1f}), {verdict}")
        print("| " + " | ".join(row) + " |")


def other_seed_choices(paths: list[str]) -> None:
    """PARA-GRPO's pooled gains after `LEARNING_RL_STEPS` for every choice of two or more seeds."""
    import itertools

    cells = [json.loads(Path(p).read_text()) for p in paths]
    by_setting: dict[tuple[int, str], dict[int, dict[str, Any]]] = defaultdict(dict)
    for c in cells:
        by_setting[(c["threads"], c["capability"].lower())][c["seed"]] = c
    seeds = sorted({c["seed"] for c in cells})
    choices = [x for n in range(2, len(seeds) + 1) for x in itertools.combinations(seeds, n)]
    print(
        f"\n## PARA-GRPO after {LEARNING_RL_STEPS} steps for other choices of seeds: "
        "acc / reward gain (SE), verdict\n"
    )
    head = ["threads", "kernels"] + ["seeds " + "+".join(map(str, c)) for c in choices]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for (threads, cap), by_seed in sorted(by_setting.items()):
        row = [str(threads), cap]
        for choice in choices:
            if not all(s in by_seed for s in choice):
                row.append("-")
                continue
            pairs = [
                (ev(by_seed[s]["before"]), ev(by_seed[s]["para_grpo"][str(LEARNING_RL_STEPS)]))
                for s in choice
            ]
            gains = {k: pooled_gain(pairs, k) for k in ("accuracy", "reward")}
            a, g = gains["accuracy"], gains["reward"]
            verdict = "learned" if learned(gains) else "**not learned**"
            row.append(f"{a.mean:+.3f} ({a.z:+.1f}) / {g.mean:+.3f} ({g.z:+.1f}), {verdict}")
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        sys.exit(__doc__)
    main(sys.argv[1:])
    other_seed_choices(sys.argv[1:])
