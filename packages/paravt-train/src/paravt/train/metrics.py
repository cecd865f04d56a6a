"""Metrics to `metrics.jsonl` (plus TensorBoard / W&B when installed and enabled), a progress bar,
and the seeded, resumable order in which training rows are visited."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from paravt.train.episode_trackers import episodes_markdown, wandb_table
from paravt.train.recipe import LoggingSpec

log = logging.getLogger("paravt.train")


class MetricsLogger:
    """Appends one JSON object per step to `run_dir/metrics.jsonl` (rank 0 only)."""

    def __init__(
        self, run_dir: Path, spec: LoggingSpec, *, rank: int, total: int, initial: int = 0
    ) -> None:
        self.path = Path(run_dir) / "metrics.jsonl"
        self.spec = spec
        self.enabled = rank == 0
        self.tb: Any = None
        self.wandb: Any = None
        self.bar: Any = None
        self.episodes_failed: set[str] = set()  # trackers whose episodes failed (warned once)
        if not self.enabled:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if spec.tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.tb = SummaryWriter(str(Path(run_dir) / "tensorboard"))
            except ImportError:
                log.warning("logging.tensorboard is on but tensorboard is not installed; skipped")
        if spec.wandb:
            try:
                import wandb

                self.wandb = wandb.init(
                    project=spec.wandb_project, dir=str(run_dir), resume="allow"
                )
            except ImportError:
                log.warning("logging.wandb is on but wandb is not installed; skipped")
        if spec.progress:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, initial=initial, desc=Path(run_dir).name, unit="step")

    def log(self, step: int, metrics: dict[str, Any], bar: dict[str, float] | None = None) -> None:
        if not self.enabled:
            return
        row = {"step": step, **{k: _plain(v) for k, v in metrics.items()}}
        if step % self.spec.log_every == 0:
            with self.path.open("a") as f:
                f.write(json.dumps(row) + "\n")
            if self.tb is not None:
                for k, v in row.items():
                    if isinstance(v, (int, float)) and k != "step":
                        self.tb.add_scalar(k, v, step)
            if self.wandb is not None:
                self.wandb.log(row, step=step)
        if self.bar is not None:
            self.bar.update(1)
            if bar:
                self.bar.set_postfix({k: f"{v:.3g}" for k, v in bar.items()})

    def log_episodes(self, step: int, records: Sequence[dict[str, Any]]) -> None:
        """Send step `step`'s recorded episodes (`EpisodeRecorder.record`'s records) to W&B (a
        table under "episodes") and TensorBoard (markdown text "episodes") when they are on and
        `logging.episodes_per_k` > 0. A tracker that fails is warned about once and gets no more
        episodes; nothing is raised into training."""
        if not self.enabled or not records or self.spec.episodes_per_k <= 0:
            return
        if self.wandb is not None and "wandb" not in self.episodes_failed:
            try:
                self.wandb.log({"episodes": wandb_table(records)}, step=step)
            except Exception as exc:  # a tracker must not stop training
                self._episodes_failed("wandb", step, exc)
        if self.tb is not None and "tensorboard" not in self.episodes_failed:
            try:
                self.tb.add_text("episodes", episodes_markdown(step, records), step)
            except Exception as exc:
                self._episodes_failed("tensorboard", step, exc)

    def _episodes_failed(self, tracker: str, step: int, exc: Exception) -> None:
        self.episodes_failed.add(tracker)
        log.warning(
            "episodes: sending step %d's episodes to %s failed (%s: %s); no more episodes go "
            "there in this run (they are still in episodes/)",
            step,
            tracker,
            type(exc).__name__,
            exc,
        )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        if self.tb is not None:
            self.tb.close()
        if self.wandb is not None:
            self.wandb.finish()


def _plain(v: Any) -> Any:
    if isinstance(v, (np.floating, np.integer)):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} does not exist: is {run_dir} a paravt-train run directory?"
        )
    rows = []
    for line in path.read_text().splitlines():
        if line.strip():
            rows.append(json.loads(line))
    return rows


class RowOrder:
    """Visits row indices in a seeded permutation per epoch; `state()`/`load()` resume exactly."""

    def __init__(self, n: int, seed: int, shuffle: bool = True) -> None:
        if n < 1:
            raise ValueError("no training rows: check data.parquet and the missing-video report")
        self.n, self.seed, self.shuffle = n, seed, shuffle
        self.epoch, self.index = 0, 0
        self._perm = self._permutation()

    def _permutation(self) -> list[int]:
        if not self.shuffle:
            return list(range(self.n))
        return np.random.default_rng([self.seed, self.epoch]).permutation(self.n).tolist()

    def take(self, k: int) -> list[int]:
        out = []
        for _ in range(k):
            if self.index >= self.n:
                self.epoch, self.index = self.epoch + 1, 0
                self._perm = self._permutation()
            out.append(self._perm[self.index])
            self.index += 1
        return out

    def state(self) -> dict[str, int]:
        return {"epoch": self.epoch, "index": self.index, "n": self.n}

    def load(self, state: dict[str, int]) -> None:
        if state.get("n") != self.n:
            log.warning("data size changed since the checkpoint (%s -> %d)", state.get("n"), self.n)
        self.epoch, self.index = int(state["epoch"]), int(state["index"])
        self._perm = self._permutation()
