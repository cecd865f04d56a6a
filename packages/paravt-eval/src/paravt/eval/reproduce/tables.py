"""From cells to Table 2 in miniature: per row and column the mean and spread over seeds.

`Summary` holds every number the markdown, the chart and the results section use, per seed, so
differences can be paired by seed (every arm of a seed starts from that seed's SFT checkpoint).
The spread is the sample standard deviation over seeds (n - 1); with one seed it is not shown.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

LABELS = {
    "base": "Tiny Qwen3-VL (untrained)",
    "sft": "+ SFT cold start",
    "grpo": "+ SFT + GRPO",
    "para_grpo": "+ SFT + PARA-GRPO",
    "anchoring_only": "+ Exploration Anchoring",
    "gating_only": "+ nFrames Gating",
    "no_tool_reward": "- Tool reward R_tool",
    "no_gamma": "- Penalty term gamma",
    "para_grpo_sequence": "Full PARA-GRPO, sequence-level anchoring",
    "grpo_lr0": "+ SFT + GRPO at lr 0 (control)",
}
BLOCK_A = ("base", "sft", "grpo", "para_grpo", "grpo_lr0")
BLOCK_B = (
    "grpo",
    "anchoring_only",
    "gating_only",
    "para_grpo",
    "para_grpo_sequence",
    "no_tool_reward",
    "no_gamma",
)
BLOCK_B_LABELS = {"grpo": "SFT + GRPO", "para_grpo": "Full PARA-GRPO"}


@dataclass
class Row:
    """One model's numbers, one entry per seed (None where a cell is missing)."""

    model: str
    f_tau: list[float | None] = field(default_factory=list)
    kappa: list[float | None] = field(default_factory=list)
    accuracy: dict[int, list[float | None]] = field(default_factory=dict)  # K -> per seed
    eval_calls: list[float | None] = field(default_factory=list)  # held-out calls/question
    # the common format measure and the tool prior's leaks (training rollouts; per seed)
    format_ok: list[float | None] = field(default_factory=list)
    leak_rate: list[float | None] = field(default_factory=list)
    # invalid tool-call attempts per episode (training rollouts; per seed), shown beside f_tau
    invalid_calls: list[float | None] = field(default_factory=list)
    eval_kappa: dict[int, list[float | None]] = field(default_factory=dict)  # K -> per seed
    per_doc: dict[int, list[list[float] | None]] = field(default_factory=dict)  # K -> per seed
    # the sampled columns (`ReproduceConfig.eval_samples` episodes per question at the rollout
    # temperature): accuracy, calls per episode and per-question means, K -> per seed
    sampled: dict[int, list[float | None]] = field(default_factory=dict)
    sampled_kappa: dict[int, list[float | None]] = field(default_factory=dict)
    sampled_per_doc: dict[int, list[list[float] | None]] = field(default_factory=dict)
    curves: list[dict[str, list[float]]] = field(default_factory=list)  # RL rows, per seed
    settle_step: list[int | None] = field(default_factory=list)
    train_seconds: list[float] = field(default_factory=list)

    def avg_accuracy(self) -> list[float | None]:
        """Per seed, the mean over the K columns (None unless every column is there)."""
        out: list[float | None] = []
        for values in zip(*self.accuracy.values()):
            out.append(None if any(v is None for v in values) else sum(values) / len(values))  # type: ignore[arg-type, unused-ignore]
        return out


@dataclass
class Summary:
    seeds: list[int]
    budgets: list[int]
    rows: dict[str, Row]
    sequential: Row | None  # block C: the PARA-GRPO checkpoints with sequential dispatch
    setup: dict[str, Any]
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        def row(r: Row) -> dict[str, Any]:
            return {
                "label": LABELS.get(r.model, r.model),
                "f_tau": r.f_tau,
                "kappa": r.kappa,
                "accuracy": {f"K={k}": v for k, v in r.accuracy.items()},
                "avg_accuracy": r.avg_accuracy(),
                "eval_calls": r.eval_calls,
                "format_ok": r.format_ok,
                "leak_rate": r.leak_rate,
                "invalid_calls": r.invalid_calls,
                "eval_kappa": {f"K={k}": v for k, v in r.eval_kappa.items()},
                "per_doc": {f"K={k}": v for k, v in r.per_doc.items()},
                "sampled_accuracy": {f"K={k}": v for k, v in r.sampled.items()},
                "sampled_kappa": {f"K={k}": v for k, v in r.sampled_kappa.items()},
                "sampled_per_doc": {f"K={k}": v for k, v in r.sampled_per_doc.items()},
                "settle_step": r.settle_step,
                "train_seconds": r.train_seconds,
                "curves": r.curves,
            }

        return {
            "seeds": self.seeds,
            "budgets": self.budgets,
            "setup": self.setup,
            "seconds": round(self.seconds, 1),
            "rows": {name: row(r) for name, r in self.rows.items()},
            "sequential": row(self.sequential) if self.sequential else None,
        }


def mean_sd(values: Sequence[float | None]) -> tuple[float | None, float | None]:
    """Mean and sample standard deviation of the present values (sd None below two values)."""
    xs = [v for v in values if v is not None and not math.isnan(v)]
    if not xs:
        return None, None
    return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else None)


def fmt(values: Sequence[float | None], *, scale: float = 1.0, digits: int = 2) -> str:
    """`mean ± sd` over seeds ('-' when nothing was measured)."""
    m, sd = mean_sd(values)
    if m is None:
        return "-"
    text = f"{m * scale:.{digits}f}"
    return text + (f" ± {sd * scale:.{digits}f}" if sd is not None else "")


def paired(a: Sequence[float | None], b: Sequence[float | None]) -> list[float]:
    """Per-seed differences a - b, over the seeds where both were measured (None and NaN, as a
    run without a logged curve gives, are not measurements)."""
    return [
        x - y
        for x, y in zip(a, b)
        if x is not None and y is not None and not math.isnan(x) and not math.isnan(y)
    ]


def _table(summary: Summary, names: Sequence[str], labels: dict[str, str]) -> list[str]:
    ks = summary.budgets
    # beside f_tau (each run's own format reward) the measures it cannot hide: invalid tool calls
    # per episode and the share of episodes that parse
    measures = any(r.format_ok or r.invalid_calls for r in summary.rows.values())
    head = "| Setting | f_tau | "
    if measures:
        head += "invalid calls / ep | format ok | leak | "
    head += "kappa | " + " | ".join(f"acc K={k}" for k in ks) + " | acc avg |"
    if measures:
        head += " " + " | ".join(f"calls K={k}" for k in ks) + " |"
    cols = 3 + (3 if measures else 0) + len(ks) + 1 + (len(ks) if measures else 0)
    lines = [head, "|" + "---|" * cols]
    for name in names:
        r = summary.rows.get(name)
        if r is None:
            continue
        accs = [fmt(r.accuracy.get(k, []), scale=100, digits=1) for k in ks]
        line = f"| {labels.get(name, LABELS.get(name, name))} | {fmt(r.f_tau)} | "
        if measures:
            line += f"{fmt(r.invalid_calls)} | {fmt(r.format_ok)} | {fmt(r.leak_rate)} | "
        line += f"{fmt(r.kappa)} | "
        line += " | ".join(accs) + f" | {fmt(r.avg_accuracy(), scale=100, digits=1)} |"
        if measures:
            line += " " + " | ".join(fmt(r.eval_kappa.get(k, [])) for k in ks) + " |"
        lines.append(line)
    return lines


def _sampled_table(summary: Summary, names: Sequence[str]) -> list[str]:
    """Held-out accuracy and calls per episode of the sampled columns, and each row's gain over
    the SFT cold start paired by question (pooled over seeds: mean ± standard error)."""
    ks = summary.budgets
    n = summary.setup.get("eval_samples", "?")
    t = summary.setup.get("eval_temperature", "?")
    lines = [
        f"### Held-out accuracy sampled: {n} episode{'' if n == 1 else 's'} per question at "
        f"temperature {t}",
        "",
        "Greedy decoding can answer every question alike in arms that sample differently (the "
        "tables above are greedy; the verdict rules read these columns when a run has them, "
        "docs/reproduce_rules.md); these columns sample as the "
        "rollouts do, seeded by the training seed and the question (every model of a seed "
        "draws with the same seeds). The gain over SFT pairs each question's mean with the SFT "
        "policy's, pooled over seeds.",
        "",
        "| Setting | "
        + " | ".join(f"acc K={k}" for k in ks)
        + " | "
        + " | ".join(f"calls K={k}" for k in ks)
        + " | "
        + " | ".join(f"- SFT K={k}" for k in ks)
        + " |",
        "|---|" + "---|" * (3 * len(ks)),
    ]
    sft = summary.rows.get("sft")
    rows = [(name, summary.rows.get(name)) for name in names]
    if summary.sequential is not None:
        rows.append(("PARA-GRPO, sequential dispatch", summary.sequential))
    for name, r in rows:
        if r is None or not r.sampled:
            continue
        gains = []
        for k in ks:
            if sft is None or r is sft:
                gains.append("-")
                continue
            diffs = paired_docs(r.sampled_per_doc.get(k, []), sft.sampled_per_doc.get(k, []))
            gains.append(mean_se_text(diffs, scale=100))
        lines.append(
            f"| {LABELS.get(name, name)} | "
            + " | ".join(fmt(r.sampled.get(k, []), scale=100, digits=1) for k in ks)
            + " | "
            + " | ".join(fmt(r.sampled_kappa.get(k, [])) for k in ks)
            + " | "
            + " | ".join(gains)
            + " |"
        )
    return [*lines, ""]


def paired_docs(a: Sequence[list[float] | None], b: Sequence[list[float] | None]) -> list[float]:
    """Per-question differences a - b over the seeds where both were measured."""
    return [
        x - y
        for da, db in zip(a, b)
        if da is not None and db is not None and len(da) == len(db)
        for x, y in zip(da, db)
    ]


def mean_se_text(values: Sequence[float], *, scale: float = 1.0) -> str:
    """`mean ± standard error` ('-' without values)."""
    if not values:
        return "-"
    m = statistics.fmean(values)
    if len(values) < 2:
        return f"{m * scale:+.1f}"
    se = statistics.stdev(values) / math.sqrt(len(values))
    return f"{m * scale:+.1f} ± {se * scale:.1f}"


def render_tables(summary: Summary) -> list[str]:
    """Table 2's three blocks as markdown lines (and the sampled columns, when measured)."""
    ks = summary.budgets
    lines = ["### (A) Training stage", "", *_table(summary, BLOCK_A, {}), ""]
    if any(n in summary.rows for n in ("anchoring_only", "gating_only")):
        lines += ["### (B) Component effectiveness", ""]
        lines += [*_table(summary, BLOCK_B, BLOCK_B_LABELS), ""]
    par = summary.rows.get("para_grpo")
    seq = summary.sequential
    if par is not None and seq is not None:
        lines += ["### (C) Dispatch mode (the same +SFT+PARA-GRPO checkpoints)", ""]
        lines += [
            "| Dispatch | calls / question | "
            + " | ".join(f"acc K={k}" for k in ks)
            + " | acc avg |",
            "|---|---|" + "---|" * (len(ks) + 1),
        ]
        for name, r in (("Sequential tool calling", seq), ("Parallel tool calling", par)):
            lines.append(
                f"| {name} | {fmt(r.eval_calls)} | "
                + " | ".join(fmt(r.accuracy.get(k, []), scale=100, digits=1) for k in ks)
                + f" | {fmt(r.avg_accuracy(), scale=100, digits=1)} |"
            )
        diffs = [
            fmt(paired(par.accuracy.get(k, []), seq.accuracy.get(k, [])), scale=100, digits=1)
            for k in ks
        ]
        avg = fmt(paired(par.avg_accuracy(), seq.avg_accuracy()), scale=100, digits=1)
        lines += [f"| parallel - sequential (paired by seed) | | {' | '.join(diffs)} | {avg} |", ""]
    if any(r.sampled for r in summary.rows.values()):
        order = [*BLOCK_A, *(n for n in BLOCK_B if n not in BLOCK_A)]
        lines += _sampled_table(summary, order)
    return lines
