"""Resumable checkpoints, written atomically.

    OUTPUT_DIR/checkpoints/step-000010/
        config.json, model.safetensors, tokenizer/processor files   (HF-loadable)
        trainer_state.pt    optimiser, scheduler, step, data position
        rng-rank{R}.pt      Python, NumPy and torch RNG states of every rank
        deepspeed/          DeepSpeed's own optimiser shards (DeepSpeed runs only)

Everything is written into `.tmp-step-000010` and renamed into place when complete, so a run
killed mid-save leaves only a temporary directory that resume ignores (and the next save removes).
`latest_checkpoint` returns the newest complete one; `--resume` loads it, truncates metrics.jsonl to
its step and continues with the next step: no step is lost or repeated.
"""

from __future__ import annotations

import json
import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from paravt.train.ranks import barrier, rank

_STEP_DIR = re.compile(r"^step-(\d+)$")
STATE_FILE = "trainer_state.pt"


def rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def checkpoint_dirs(output_dir: Path) -> list[tuple[int, Path]]:
    root = Path(output_dir) / "checkpoints"
    if not root.is_dir():
        return []
    found = []
    for p in root.iterdir():
        m = _STEP_DIR.match(p.name)
        if m and p.is_dir() and (p / STATE_FILE).is_file():
            found.append((int(m.group(1)), p))
    return sorted(found)


def prune_checkpoints(output_dir: Path, keep_last: int, step: int) -> None:
    """Remove every `step-*` folder before `step` except the newest `keep_last` complete ones,
    including incomplete ones: a run killed while it removed an old checkpoint leaves it half
    deleted (no state file), which `checkpoint_dirs` no longer lists and so would keep forever."""
    kept = {p for _, p in checkpoint_dirs(output_dir)[-keep_last:]} if keep_last > 0 else set()
    root = Path(output_dir) / "checkpoints"
    for old in root.iterdir() if root.is_dir() else ():
        m = _STEP_DIR.match(old.name)
        if m and old.is_dir() and old not in kept and int(m.group(1)) < step:
            shutil.rmtree(old, ignore_errors=True)


def latest_checkpoint(output_dir: Path) -> Path | None:
    """The newest complete checkpoint of a run, or None."""
    found = checkpoint_dirs(output_dir)
    return found[-1][1] if found else None


def save_hf(
    directory: Path, model: Any, processor: Any, state: dict[str, torch.Tensor] | None
) -> None:
    """HF-loadable weights (safetensors) + processor files into `directory` (rank 0 only)."""
    target = getattr(model, "module", model)
    target.save_pretrained(directory, state_dict=state, safe_serialization=True)
    if processor is not None:
        processor.save_pretrained(directory)


def save_checkpoint(
    output_dir: Path,
    step: int,
    backend: Any,
    processor: Any,
    *,
    data_state: dict[str, Any],
    extra: dict[str, Any] | None = None,
    keep_last: int = 2,
) -> Path:
    """Write `checkpoints/step-<step, six digits>` (e.g. `step-000010`) atomically (collective:
    call on every rank)."""
    root = Path(output_dir) / "checkpoints"
    final = root / f"step-{step:06d}"
    tmp = root / f".tmp-step-{step:06d}"
    me = rank()
    if me == 0:
        root.mkdir(parents=True, exist_ok=True)
        for stale in root.glob(".tmp-step-*"):
            shutil.rmtree(stale, ignore_errors=True)
        tmp.mkdir()
    barrier()
    model_state = backend.full_model_state()
    optim_state = backend.optimizer_state()
    backend.save_deepspeed(tmp / "deepspeed")
    torch.save(rng_state(), tmp / f"rng-rank{me}.pt")
    if me == 0:
        save_hf(tmp, backend.model, processor, model_state)
        torch.save(
            {
                "step": step,
                "optimizer": optim_state,
                "scheduler": backend.scheduler.state_dict(),
                "data": data_state,
                "extra": extra or {},
            },
            tmp / STATE_FILE,
        )
    barrier()
    if me == 0:
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
        prune_checkpoints(output_dir, keep_last, step)
    barrier()
    return final


def load_checkpoint(directory: Path, backend: Any) -> dict[str, Any]:
    """Restore optimiser, scheduler and this rank's RNG from `directory` (the weights were loaded
    from it with `from_pretrained`); returns the trainer state (step, data position, extra)."""
    state = torch.load(directory / STATE_FILE, map_location="cpu", weights_only=False)
    if backend.ds_engine is not None:
        backend.load_deepspeed(directory / "deepspeed")
    else:
        backend.load_optimizer_state(state["optimizer"])
    backend.scheduler.load_state_dict(state["scheduler"])  # ours to advance, also under ZeRO
    rng_file = directory / f"rng-rank{rank()}.pt"
    if rng_file.is_file():
        set_rng_state(torch.load(rng_file, map_location="cpu", weights_only=False))
    return state


def truncate_metrics(path: Path, last_step: int) -> None:
    """Drop metrics rows after `last_step` (they belong to steps that will run again)."""
    if rank() != 0 or not path.is_file():
        return
    keep = []
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut by the kill
        if int(row.get("step", 0)) <= last_step:
            keep.append(line)
    path.write_text("".join(line + "\n" for line in keep))
