"""SFT and RL steps under torchrun with FSDP2 (2 CPU ranks, gloo) and single-process DeepSpeed
ZeRO-2; an FSDP2 checkpoint loads and resumes in one process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

DRIVER = Path(__file__).parent / "dist_driver.py"


def _env(tmp: Path) -> dict[str, str]:
    cache = Path(os.environ.get("PARAVT_CACHE_DIR", Path.home() / ".cache" / "paravt"))
    return {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "TORCH_EXTENSIONS_DIR": str(cache / "torch_extensions"),
    }


def _steps(path: Path) -> list[dict[str, float]]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def _check_run(out: Path) -> None:
    for stage in ("sft", "rl"):
        rows = _steps(out / stage / "metrics.jsonl")
        assert [r["step"] for r in rows] == [1, 2]
        assert all(r["loss"] is not None and r["grad_norm"] is not None for r in rows)
        assert (out / stage / "checkpoints" / "step-000002" / "model.safetensors").is_file()
        assert (out / stage / "final" / "model.safetensors").is_file()


@pytest.mark.slow
def test_sft_and_rl_steps_run_under_torchrun_with_fsdp2_and_the_checkpoint_loads_in_one_process(
    tiny_model_path: Path, tmp_path: Path
) -> None:
    torchrun = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))
    cmd = [
        torchrun,
        "--nproc_per_node",
        "2",
        str(DRIVER),
        str(tiny_model_path),
        str(tmp_path),
        "fsdp2",
    ]
    done = subprocess.run(cmd, env=_env(tmp_path), capture_output=True, timeout=900)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    _check_run(tmp_path)
    rl = tmp_path / "rl" / "checkpoints" / "step-000002"
    assert {p.name for p in rl.glob("rng-rank*.pt")} == {"rng-rank0.pt", "rng-rank1.pt"}

    # One process: the sharded run's checkpoint loads as a plain HF model, and its optimiser and
    # scheduler state load into a single-process backend.
    import torch
    from transformers import AutoModelForImageTextToText

    from paravt.train.checkpoint import load_checkpoint
    from paravt.train.distributed import Backend
    from paravt.train.recipe import load_recipe

    model = AutoModelForImageTextToText.from_pretrained(rl)
    assert all(torch.isfinite(p).all() for p in model.parameters())
    recipe = load_recipe("tiny_paragrpo", [f"model.path={rl}", f"output_dir={tmp_path / 'one'}"])
    backend = Backend(model, recipe.distributed, recipe.optim, recipe.max_steps)
    state = load_checkpoint(rl, backend)
    assert state["step"] == 2
    assert len(backend.optimizer.state) == sum(1 for p in model.parameters() if p.requires_grad)


@pytest.mark.slow
def test_sft_and_rl_steps_run_in_one_process_with_deepspeed_zero2(
    tiny_model_path: Path, tmp_path: Path
) -> None:
    import deepspeed  # noqa: F401  (paravt-train[deepspeed]; missing means a broken test venv)

    cmd = [sys.executable, str(DRIVER), str(tiny_model_path), str(tmp_path), "deepspeed"]
    done = subprocess.run(cmd, env=_env(tmp_path), capture_output=True, timeout=900)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    _check_run(tmp_path)
    assert (tmp_path / "rl" / "checkpoints" / "step-000002" / "deepspeed").is_dir()
