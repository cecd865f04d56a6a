"""The curves chart: the format (format ok where measured, else f_tau), invalid tool calls per
episode and kappa per RL step for block A (as the paper's figure) and block B, each line the mean
over seeds with the seed spread (min to max) shaded; base and SFT, which have no RL steps, are
horizontal lines at their training-prompt rollouts' value with their spread. A fourth column
shows held-out accuracy per row (mean over seeds, min-max whiskers) per K.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from paravt.eval.reproduce.tables import BLOCK_A, BLOCK_B, LABELS, Row, Summary, mean_sd

# One colour per model in every panel.
COLORS = {
    "base": "tab:gray",
    "sft": "tab:orange",
    "grpo": "tab:blue",
    "para_grpo": "tab:red",
    "anchoring_only": "tab:green",
    "gating_only": "tab:purple",
    "no_tool_reward": "tab:brown",
    "no_gamma": "tab:olive",
    "sequential": "tab:pink",
    "para_grpo_sequence": "tab:cyan",
    "grpo_lr0": "black",
}


def _band(ax: Any, row: Row, key: str, label: str) -> None:
    curves = [c[key] for c in row.curves if c.get(key)]
    if not curves:
        return
    n = min(len(c) for c in curves)
    steps = list(range(1, n + 1))
    per_step = [[c[i] for c in curves] for i in range(n)]
    mean = [sum(v) / len(v) for v in per_step]
    line = ax.plot(steps, mean, label=label, color=COLORS.get(row.model), lw=1.6)
    if len(curves) > 1:
        ax.fill_between(
            steps,
            [min(v) for v in per_step],
            [max(v) for v in per_step],
            alpha=0.2,
            color=line[0].get_color(),
        )


# a curve's key -> the Row field holding its per-seed value (where the names differ)
ROW_FIELDS = {"tool/invalid_calls": "invalid_calls"}


def _flat(ax: Any, row: Row, key: str, label: str, steps: int) -> None:
    values = [
        v for v in getattr(row, ROW_FIELDS.get(key, key)) if v is not None and not math.isnan(v)
    ]
    if not values or steps < 1:
        return
    m = sum(values) / len(values)
    line = ax.plot([1, steps], [m, m], ls="--", lw=1.2, label=label, color=COLORS.get(row.model))
    if len(values) > 1:
        ax.fill_between(
            [1, steps], [min(values)] * 2, [max(values)] * 2, alpha=0.12, color=line[0].get_color()
        )


def _bars(ax: Any, s: Summary, names: Sequence[str], title: str) -> None:
    rows = [(n, s.rows[n]) for n in names if n in s.rows]
    if s.sequential is not None and "para_grpo" in names and title.startswith("(A)"):
        rows.append(("sequential", s.sequential))
    ks = s.budgets
    width = 0.8 / max(1, len(rows))
    for i, (name, row) in enumerate(rows):
        means, lo, hi = [], [], []
        for k in ks:
            vals = [v * 100 for v in row.accuracy.get(k, []) if v is not None]
            m, _ = mean_sd(vals)
            means.append(m or 0.0)
            lo.append((m or 0.0) - min(vals, default=0.0))
            hi.append(max(vals, default=0.0) - (m or 0.0))
        xs = [j + i * width for j in range(len(ks))]
        label = "PARA-GRPO, sequential dispatch" if name == "sequential" else LABELS.get(name, name)
        ax.bar(xs, means, width, yerr=[lo, hi], capsize=2, label=label, color=COLORS.get(name))
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(ks))], [f"K={k}" for k in ks])
    ax.set_ylim(0, 105)
    ax.set_ylabel("held-out accuracy, % (greedy)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=6, loc="upper right")


def draw_chart(s: Summary, path: Path) -> Path:
    """Write the chart to `path` (PNG) and return it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with_b = any(n in s.rows for n in ("anchoring_only", "gating_only"))
    nrows = 2 if with_b else 1
    fig, axes = plt.subplots(nrows, 4, figsize=(20, 4.4 * nrows), squeeze=False)
    steps = max((len(c.get("kappa", [])) for r in s.rows.values() for c in r.curves), default=0)
    # the common format measure where the run has it (every arm's f_tau is its own reward)
    common = any(v is not None for r in s.rows.values() for v in r.format_ok)
    first = (
        ("format_ok", 0, "format ok (share of rollouts that parse, T=0.7)")
        if common
        else ("f_tau", 0, "f_tau (format reward, T=0.7)")
    )
    # beside the format, what a format reward cannot hide: invalid tool calls per episode
    invalid = ("tool/invalid_calls", 1, "invalid tool calls / episode (T=0.7)")
    for key, col, ylabel in (first, invalid, ("kappa", 2, "kappa")):
        ax = axes[0][col]
        for name in BLOCK_A:
            row = s.rows.get(name)
            if row is None:
                continue
            if row.curves:
                _band(ax, row, key, LABELS.get(name, name))
            else:
                _flat(ax, row, key, LABELS.get(name, name), steps)
        ax.set_title(f"(A) {key} per RL step (mean over seeds, min-max shaded)", fontsize=9)
        ax.set_xlabel("RL step")
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=7)
        if with_b:
            ax = axes[1][col]
            for name in BLOCK_B:
                row = s.rows.get(name)
                if row is not None and row.curves:
                    _band(ax, row, key, LABELS.get(name, name))
            ax.set_title(f"(B) {key} per RL step", fontsize=9)
            ax.set_xlabel("RL step")
            ax.set_ylabel(ylabel)
            ax.legend(fontsize=7)
    _bars(axes[0][3], s, BLOCK_A, "(A) and (C) held-out accuracy per overview budget K")
    if with_b:
        _bars(axes[1][3], s, BLOCK_B, "(B) held-out accuracy per overview budget K")
    fig.suptitle(f"ParaVT Table 2 in miniature: tiny Qwen3-VL, {len(s.seeds)} seeds", fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
