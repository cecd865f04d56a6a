"""The CPU rehearsal of the 8-GPU trainers: torchrun with 2 ranks on gloo, FSDP2 and DeepSpeed
ZeRO-2, unequal work per rank (rehearsal_driver.py), and single-process DeepSpeed ZeRO-2; an FSDP2
checkpoint loads and resumes in one process.

What the rehearsal proves (within a 60 s collective timeout and a 280 s wall bound): no hang with
rank-dependent micro-batch and sub-agent counts (a rank with no usable SFT row included); the same
weights on every rank after every step; SFT weights, losses and gradient norms equal to one
process training on the same rows; RL advantages normalised over the global batch and the loss
normalised by the global trained-token count. What it cannot prove: anything about CUDA devices
(see test_device_placement.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

DRIVER = Path(__file__).parent / "dist_driver.py"
REHEARSAL = Path(__file__).parent / "rehearsal_driver.py"
REHEARSAL_BOUND_S = 280
GRAD_DRIVER = Path(__file__).parent / "dist_grad_driver.py"  # test_guard_distributed_gradient.py


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


def run_rehearsal(
    model: Path, out: Path, strategy: str = "fsdp2"
) -> subprocess.CompletedProcess[bytes]:
    """torchrun 2 ranks of the rehearsal, then the one-process SFT reference; raises
    subprocess.TimeoutExpired past the bound (a hang)."""
    torchrun = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))
    cmd = [torchrun, "--nproc_per_node", "2", str(REHEARSAL), str(model), str(out)]
    env = {**_env(out), "PARAVT_REHEARSAL_STRATEGY": strategy}
    done = subprocess.run(cmd, env=env, capture_output=True, timeout=REHEARSAL_BOUND_S)
    if done.returncode == 0:
        ref = [sys.executable, str(REHEARSAL), str(model), str(out), "--sft-reference"]
        done = subprocess.run(ref, env=env, capture_output=True, timeout=120)
    return done


def _per_rank(out: Path, stage: str) -> list[list[dict]]:  # type: ignore[type-arg]
    ranks = [_steps(out / f"{stage}-rank{r}.jsonl") for r in (0, 1)]
    assert [len(r) for r in ranks] == [3, 3], stage
    return ranks


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["fsdp2", "deepspeed"])
def test_the_two_rank_rehearsal_runs_unequal_work_in_step_and_normalises_globally(
    tiny_model_path: Path, tmp_path: Path, strategy: str
) -> None:
    if strategy == "deepspeed":
        import deepspeed  # noqa: F401  (paravt-train[deepspeed]; missing means a broken venv)
    done = run_rehearsal(tiny_model_path, tmp_path, strategy)
    assert done.returncode == 0, done.stderr.decode()[-4000:]

    # SFT: equal micro-batch counts per step (3/0, 1/2, 3/2 rows padded to the maximum); the
    # same weights on both ranks after every step
    r0, r1 = _per_rank(tmp_path, "sft")
    assert [r["micro_batches"] for r in r0] == [3, 2, 3]
    assert [r["micro_batches"] for r in r1] == [3, 2, 3]
    for a, b in zip(r0, r1):
        assert a["checksum"] == b["checksum"], a["step"]
    # ... and what one process training on the same 6 rows per step computes
    ref = _steps(tmp_path / "sft-reference-rank0.jsonl")
    base = _steps(tmp_path / "sft-reference-rank0.jsonl")[0]["weight_sum"]
    for a, b in zip(r0, ref):
        assert a["tokens"] == b["tokens"]
        assert _rel(a["loss"], b["loss"]) < 1e-4, (a, b)
        assert _rel(a["grad_norm"], b["grad_norm"]) < 1e-3, (a, b)
    assert _rel(r0[-1]["weight_sum"] - base, ref[-1]["weight_sum"] - base) < 1e-2

    # RL: rank 0 trains sub-agents, rank 1 has none; same weights and replica on both ranks
    q0, q1 = _per_rank(tmp_path, "rl")
    assert sum(r["subagents"] for r in q0) > 0 and sum(r["subagents"] for r in q1) == 0
    for a, b in zip(q0, q1):
        assert a["checksum"] == b["checksum"] and a["replica_checksum"] == b["replica_checksum"]
        if strategy == "fsdp2":  # the rollout replica holds exactly the policy's weights
            assert a["replica_checksum"] == a["checksum"]
    # advantages: one process's group advantages over both ranks' totals, in rank order
    from paravt.rewards import AdvantageConfig, group_advantages

    config = AdvantageConfig(reward_scaling=10.0, reward_bias=-0.2, batch_norm=True)
    differs = False
    for a, b in zip(q0, q1):
        want = group_advantages(a["advantage_totals"] + b["advantage_totals"], 2, config=config)
        got = a["advantages"] + b["advantages"]
        assert got == pytest.approx(want, abs=1e-9), a["step"]
        per_rank = group_advantages(a["advantage_totals"], 2, config=config) + group_advantages(
            b["advantage_totals"], 2, config=config
        )
        differs |= per_rank != pytest.approx(want, abs=1e-6)
        # the token-mean normalisers (one per mini-batch) count both ranks' trained tokens
        assert a["normaliser"] == b["normaliser"] == a["trained_tokens"] + b["trained_tokens"]
        # loss.ppo_mini_batches=2: two optimiser steps on each rank, in step
        assert a["optimizer_steps"] == b["optimizer_steps"] == 2
    assert differs, "no step where per-rank and global normalisation differ: the check is void"
    rows = _steps(tmp_path / "rl" / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3]
    if strategy != "fsdp2":
        return

    # the FSDP2 checkpoint loads as a plain HF model with its optimiser in one process
    import torch
    from transformers import AutoModelForImageTextToText

    from paravt.train.checkpoint import load_checkpoint
    from paravt.train.distributed import Backend
    from paravt.train.recipe import load_recipe

    rl = tmp_path / "rl" / "checkpoints" / "step-000002"
    assert {p.name for p in rl.glob("rng-rank*.pt")} == {"rng-rank0.pt", "rng-rank1.pt"}
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


@pytest.mark.slow
def test_the_gradient_guard_fails_on_an_in_place_op_on_a_view_the_fsdp2_root_returned(
    tiny_model_path: Path, tmp_path: Path
) -> None:
    """The teeth of the 2-rank gradient guard (dist_grad_driver.py) for FSDP2's "returned a view
    tensor" hazard: an in-place op on a view that the root module returned drops the root's
    pre-backward hook. With our root (parameters kept unsharded after forward) that is silent and
    the gradients still match, so the driver makes the warning an error; the sabotaged ranks (root
    `logits` made a view, then `mul_(1.0)` on it before the loss) must fail loudly, before any
    gradient is written. Without the sabotage the same driver passes the guard (no view leaves
    the root: `paravt.train.modeling._logits_only`)."""
    torchrun = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))
    cmd = [torchrun, "--standalone", "--nproc_per_node", "2"]
    cmd += [str(GRAD_DRIVER), str(tiny_model_path), str(tmp_path)]
    env = {
        **_env(tmp_path),
        "PARAVT_GRAD_SABOTAGE": "inplace-view",
        "PARAVT_GRAD_AGGREGATIONS": "token-mean",
    }
    done = subprocess.run(cmd, env=env, capture_output=True, timeout=240)
    err = done.stderr.decode()
    assert done.returncode != 0, err[-4000:]
    assert "UserWarning: FSDP2-wrapped module" in err, err[-4000:]
    assert "returned a view tensor" in err, err[-4000:]
    assert not list(tmp_path.glob("grads-*.pt"))
