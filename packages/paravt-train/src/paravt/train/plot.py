"""`paravt-train plot RUN_DIR...`: training curves (reward, f_tau with format ok and invalid tool
calls per episode beside it, kappa, accuracy vs step) to PNG."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from paravt.train.metrics import read_metrics

PANELS = (
    ("reward/total", "reward"),
    ("f_tau", "f_tau (format reward)"),
    # beside f_tau, what a reward-shaped format score cannot hide
    ("format_ok", "format ok (share of episodes that parse)"),
    ("tool/invalid_calls", "invalid tool calls / episode"),
    ("kappa", "kappa (tool calls / rollout)"),
    ("accuracy", "accuracy"),
)


def plot_runs(runs: Sequence[Path], out: Path | None = None) -> Path:
    """Draw the six RL curves of every run (overlaid, one colour per run) into one PNG.

    In: run directories holding metrics.jsonl. Out: the PNG path (default RUN_DIR/curves.png of
    the first run). SFT runs (no reward columns) are drawn as their loss.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [Path(r) for r in runs]
    data = {r: read_metrics(r) for r in runs}
    rl = any("reward/total" in row for rows in data.values() for row in rows)
    panels = PANELS if rl else (("loss", "loss"), ("lr", "learning rate"))
    nrows = 1 if len(panels) <= 4 else 2
    ncols = -(-len(panels) // nrows)
    fig, grid = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 3.4 * nrows), squeeze=False)
    axes = [ax for row in grid for ax in row]
    for ax, (key, title) in zip(axes, panels):
        for run, rows in data.items():
            pts = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
            if pts:
                xs, ys = zip(*pts)
                ax.plot(xs, ys, marker="o", markersize=3, label=run.name)
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    for ax in axes[len(panels) :]:
        ax.set_visible(False)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    target = Path(out) if out is not None else runs[0] / "curves.png"
    target.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(target, dpi=110)
    plt.close(fig)
    return target
