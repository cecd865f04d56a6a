"""The table of `evidence_credit.py`'s cells: per seed and numeric, each reward's run before and
after RL, how often each falls into the invalid-call hole, and the pooled verdicts of the rule in
experiments/README.md ("evidence_credit.py").

    python experiments/evidence_credit_table.py experiments/results/evidence_credit/*.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from paravt.train.miniature import (
    FORMAT_OK_DROP_MAX,
    INVALID_CALLS_MAX,
    Evaluation,
    format_held,
    learned,
    mean_and_se,
    pooled_gain,
)

RUNS = ("reference", "evidence", "candidate", "lr0", "sign")
# Run 9's treatment of a miss within measurement noise (experiments/README.md, committed before
# its first cell): a run whose invalid calls after RL, or whose format ok drop, lies within these
# distances of its margin (about two binomial standard errors of 256 episodes), on either side,
# is measured again on a fresh draw four times the size (`evidence_credit.py --remeasure`), and
# that measurement decides whether it is in the hole.
BAND_INVALID, BAND_FORMAT = 0.05, 0.03


def borderline(b: dict[str, float], a: dict[str, float]) -> bool:
    drop = b["format_ok"] - a["format_ok"]
    return (
        abs(a["tool/invalid_calls"] - INVALID_CALLS_MAX) <= BAND_INVALID
        or abs(drop - FORMAT_OK_DROP_MAX) <= BAND_FORMAT
    )


def held(cell: dict[str, Any], name: str) -> tuple[bool, str]:
    """Whether run `name` of `cell` kept its format (not in the hole), and how that was read:
    its own held-out draw, or the fresh larger one where run 9's band sent it."""
    run = cell["runs"][name]
    reward = "reference" if run["reward"].startswith("reference") else "evidence"
    b, a = cell["before"][reward]["metrics"], run["after"]["metrics"]
    again = cell.get("remeasured", {}).get(name)
    if again is not None:
        b2, a2 = again["before"]["metrics"], again["after"]["metrics"]
        return format_held(b2, a2), (
            f"re-measured ({again['group_size']} a prompt): invalid "
            f"{a2['tool/invalid_calls']:.3f}, format ok {b2['format_ok']:.3f} -> "
            f"{a2['format_ok']:.3f}"
        )
    return format_held(b, a), "borderline, not re-measured" if borderline(b, a) else ""


def ev(d: dict[str, Any]) -> Evaluation:
    return Evaluation(d["metrics"], d["per_prompt"])


def row(cell: dict[str, Any], name: str) -> str | None:
    run = cell["runs"].get(name)
    if run is None:
        return None
    reward = "reference" if run["reward"].startswith("reference") else "evidence"
    b, a = cell["before"][reward]["metrics"], run["after"]["metrics"]

    def arrow(key: str, fmt: str = ".2f") -> str:
        return f"{b[key]:{fmt}} -> {a[key]:{fmt}}"

    acc, acc_se = run["accuracy_gain"]
    rew, rew_se = run["reward_gain"]
    kept, how = held(cell, name)
    hole = ("no" if kept else "**in the hole**") + (f" ({how})" if how else "")
    return (
        f"| {cell['numeric']} | {cell['seed']} | {name} | {arrow('accuracy', '.3f')} "
        f"({acc:+.3f} ± {acc_se:.3f}) | {arrow('reward/total', '.3f')} ({rew:+.3f} ± {rew_se:.3f}) "
        f"| {arrow('tool/call_attempts')} | {arrow('tool/invalid_calls')} | "
        f"{arrow('tool/responses')} | {arrow('format_ok')} | {arrow('f_tau')} | {hole} |"
    )


def pooled(cells: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    pairs = []
    for c in cells:
        run = c["runs"].get(name)
        if run is None:
            return None
        reward = "reference" if run["reward"].startswith("reference") else "evidence"
        pairs.append((ev(c["before"][reward]), ev(run["after"])))
    gains = {k: pooled_gain(pairs, k) for k in ("accuracy", "reward")}
    return {"gains": gains, "learned": learned(gains), "held": [held(c, name)[0] for c in cells]}


def difference(
    cells: list[dict[str, Any]], a: str = "evidence", b: str = "reference"
) -> tuple[float, float, int]:
    """Run `a` minus run `b` accuracy after RL, paired by prompt over every cell."""
    diffs = [
        c["runs"][a]["after"]["per_prompt"][p]["accuracy"]
        - c["runs"][b]["after"]["per_prompt"][p]["accuracy"]
        for c in cells
        for p in c["runs"][a]["after"]["per_prompt"]
    ]
    m, se = mean_and_se(diffs)
    return m, se, len(diffs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cells", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, default=None, help="also write the markdown here")
    args = parser.parse_args()
    # a folder's other JSON (held_out_off_format.py's episodes) is not a cell
    cells = [c for c in (json.loads(p.read_text()) for p in args.cells) if "runs" in c]
    cells.sort(key=lambda c: (c["numeric"], c["seed"]))
    lines = [
        "| numeric | seed | run | accuracy (gain ± SE) | reward (gain ± SE) | calls / episode "
        "| invalid / episode | tool responses / episode | format ok | f_tau | hole |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in cells:
        for name in RUNS:
            r = row(c, name)
            if r:
                lines.append(r)
    lines.append("")
    for numeric in sorted({c["numeric"] for c in cells}):
        group = [c for c in cells if c["numeric"] == numeric]
        seeds = [c["seed"] for c in group]
        lines.append(f"**{numeric}** (seeds {', '.join(map(str, seeds))}):")
        for name in ("reference", "evidence", "candidate"):
            p = pooled(group, name)
            if p is None:
                continue
            g = p["gains"]
            lines.append(
                f"- {name}: in the hole in {p['held'].count(False)} of {len(p['held'])} seeds; "
                f"pooled {g['accuracy']}, {g['reward']}; learned() pooled: {p['learned']}"
            )
        if all("reference" in c["runs"] and "evidence" in c["runs"] for c in group):
            m, se, n = difference(group)
            lines.append(
                f"- evidence - reference, held-out accuracy after RL paired by prompt: "
                f"{m:+.3f} ± {se:.3f} (n={n})"
            )
        if all("candidate" in c["runs"] and "evidence" in c["runs"] for c in group):
            m, se, n = difference(group, "candidate", "evidence")
            lines.append(
                f"- candidate ({' '.join(group[0].get('candidate', []))}) - evidence, held-out "
                f"accuracy after RL paired by prompt: {m:+.3f} ± {se:.3f} (n={n})"
            )
        test = [c for c in group if c["seed"] in (0, 1)]
        if len(test) == 2:
            for name in ("evidence", "lr0", "sign"):
                p = pooled(test, name)
                if p is None:
                    continue
                verdict = p["learned"] and all(p["held"])
                lines.append(
                    f"- learning test's verdict (seeds 0 + 1) on {name}: "
                    f"{'PASS' if verdict else 'fail'} (learned {p['learned']}, format held "
                    f"{p['held']}; {p['gains']['accuracy']}, {p['gains']['reward']})"
                )
        times = [c["time_s"]["total"] for c in group]
        lines.append(
            f"- time per cell {min(times) / 60:.1f}-{max(times) / 60:.1f} min; torch "
            f"{sorted({c['torch'] for c in group})}, kernels "
            f"{sorted({c['capability'] for c in group})}"
        )
        lines.append("")
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
