"""The run skeleton both trainers stand on (`sft.py` and `rl/run.py` are siblings on it).

`start_run`: the output directory, the device and process group, seeds, the model and processor
(fp32 master weights under FSDP2), the optimiser and sharding (`Backend`). `Run.resume`: the last
complete checkpoint's state (or a fresh metrics file) and the metrics logger. `Run.checkpoint`
after a step, `Run.finish` at the end: the final HF-loadable model with the agent protocol it was trained
under, written whole or not at all.
"""

from __future__ import annotations

import logging
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from paravt.train.checkpoint import (
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
    save_hf,
    truncate_metrics,
)
from paravt.train.distributed import Backend
from paravt.train.metrics import MetricsLogger
from paravt.train.modeling import load_model_and_processor, pick_device, pick_dtype
from paravt.train.process_group import init_distributed
from paravt.train.protocol import save_trained_protocol
from paravt.train.ranks import barrier, is_rank0

__all__ = ["Run", "save_final", "seed_everything", "start_run"]

log = logging.getLogger("paravt.train")


def seed_everything(seed: int) -> None:
    """Python, NumPy and torch generators from one seed (each rank passes its own)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def save_final(final: Path, backend: Backend, processor: Any) -> None:
    """The HF-loadable final model, written to a temporary directory and renamed (collective)."""
    state = backend.full_model_state()
    if is_rank0():
        tmp = final.with_name(f".tmp-{final.name}")
        shutil.rmtree(tmp, ignore_errors=True)
        save_hf(tmp, backend.model, processor, state)
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
    barrier()


@dataclass
class Run:
    """What a trainer has once `start_run` returns; `resume` then restores the checkpoint's state
    (after anything whose set-up must not see the restored random generators)."""

    recipe: Any  # SFTRecipe | RLRecipe
    out: Path
    device: torch.device
    rank: int
    world: int
    compute_dtype: torch.dtype
    model: Any
    processor: Any
    backend: Backend
    checkpoint_dir: Path | None  # the checkpoint to resume from (None: a fresh run)
    start: int = 0  # the last step done (0: a fresh run), set by `resume`
    data_state: dict[str, Any] | None = None  # the data order's state at `start`
    logger: MetricsLogger = field(init=False)

    def resume(self) -> MetricsLogger:
        """Restore optimiser, scheduler, RNG and data position from `checkpoint_dir` and cut
        metrics.jsonl back to it; a fresh run removes a metrics.jsonl left by an earlier run.
        Returns the metrics logger, starting at `start` (collective)."""
        metrics = self.out / "metrics.jsonl"
        if self.checkpoint_dir is not None:
            state = load_checkpoint(self.checkpoint_dir, self.backend)
            self.start, self.data_state = int(state["step"]), state["data"]
            truncate_metrics(metrics, self.start)
            log.info("resumed from %s at step %d", self.checkpoint_dir, self.start)
        elif self.rank == 0 and metrics.exists():
            metrics.unlink()
        self.logger = MetricsLogger(
            self.out, self.recipe.logging, rank=self.rank, total=self.recipe.max_steps,
            initial=self.start,
        )  # fmt: skip
        return self.logger

    def checkpoint(self, step: int, data_state: dict[str, Any]) -> None:
        """Save a checkpoint after `step` when the recipe asks for one then (collective)."""
        every = self.recipe.checkpoint.every_steps
        if every and step % every == 0:
            save_checkpoint(
                self.out,
                step,
                self.backend,
                self.processor,
                data_state=data_state,
                keep_last=self.recipe.checkpoint.keep_last,
            )

    def finish(self) -> Path:
        """Close the logger; write `final/` (with `agent_protocol.json`) unless the recipe says
        not to. Returns the `final/` path (collective)."""
        self.logger.close()
        final = self.out / "final"
        if self.recipe.checkpoint.save_final:
            save_final(final, self.backend, self.processor)
            save_trained_protocol(final, self.recipe)  # how this model was trained
        return final


def start_run(recipe: Any, *, resume: bool) -> Run:
    """Set a run up as the recipe says (collective: every rank calls it): device, process group,
    seeds, model and processor, `Backend`; with `resume`, the newest complete checkpoint in
    `output_dir` is found (and loaded by `Run.resume`)."""
    out = Path(recipe.output_dir)
    device = pick_device(recipe.distributed.device)
    rank, world = init_distributed(recipe.distributed, device)
    seed_everything(recipe.seed + rank)
    ckpt = latest_checkpoint(out) if resume else None
    compute_dtype = pick_dtype(recipe.model, device)
    master = torch.float32 if recipe.distributed.strategy == "fsdp2" else compute_dtype
    model, processor = load_model_and_processor(recipe.model, device, path=ckpt, dtype=master)
    backend = Backend(
        model, recipe.distributed, recipe.optim, recipe.max_steps, compute_dtype=compute_dtype
    )
    return Run(recipe, out, device, rank, world, compute_dtype, model, processor, backend, ckpt)
