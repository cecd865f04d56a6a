"""tools/gpu_check.py, rehearsed on the CPU (`--device cpu --size tiny`, tiny step counts): the
script a person runs on a GPU must keep working between GPU runs. It goes through the path the GPU
machine takes: frames predecoded into the data folder, torchcodec blocked for the whole check. A
PASS here says the rows run; it says nothing about CUDA (the env row says so)."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
ROWS = ["env", "frames", "sft", "rl", "logprob", "placement", "real-size (tiny)"]


@pytest.mark.slow
def test_the_gpu_check_rehearses_every_row_on_the_cpu(tmp_path: Path) -> None:
    small = [
        "rollout.batch_prompts=2",
        "rollout.group_size=2",
        "rollout.max_new_tokens=24",
        "rollout.subagent_max_new_tokens=8",
    ]
    cmd = [sys.executable, str(ROOT / "tools" / "gpu_check.py"), "--device", "cpu"]
    cmd += ["--size", "tiny", "--data", str(tmp_path / "data"), "--videos", "2"]
    cmd += ["--out", str(tmp_path / "out"), "--sft-steps", "2", "--rl-steps", "1"]
    cmd += ["--learning-sft-steps", "1", "--learning-rl-steps", "1", "--eval-prompts", "2"]
    cmd += ["--learning-seeds", "2"]
    cmd += ["--real-steps", "2", "--sft-override", "sft.num_workers=0"]
    for override in small:
        cmd += ["--override", override]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]

    rows = {r["check"]: r for r in json.loads((tmp_path / "out" / "report.json").read_text())}
    assert [*rows] == [*ROWS, "learning (rehearsal)"]
    assert all(r["status"] == "PASS" for r in rows.values()), rows
    # the GPU machine's path: frames from the folder, identical to torchcodec's, torchcodec blocked
    assert "then blocked" in rows["env"]["detail"]
    assert rows["frames"]["data"]["max_pixel_diff"] == 0
    assert rows["frames"]["data"]["timestamps_equal"] is True
    # fp32 on the CPU: the engine's log-probs are the trainer's
    assert rows["logprob"]["data"]["max"] < 1e-3 and rows["logprob"]["data"]["tokens"] > 0
    # every op of the audited steps ran where expected; the recipe's bf16 is what multiplied
    audit = rows["placement"]["data"]
    assert audit["ops"] > 1000 and not audit["fallback"]
    assert set(audit["matmul_flops_by_dtype"]) == {"bfloat16"}
    real = rows["real-size (tiny)"]["data"]
    assert real["rl"]["tokens_per_s"] > 0 and real["rl"]["mfu"] is None  # MFU n/a on the CPU
    learning = rows["learning (rehearsal)"]
    assert "not a verdict" in learning["detail"]
    # two seeds, each its own cold start and RL run, reported one by one and pooled
    assert learning["data"]["seeds_run"] == [0, 1] and learning["data"]["stopped"] is None
    runs = learning["data"]["runs"]
    assert [(r["seed"], r["strategy"]) for r in runs] == [(0, "fsdp2"), (1, "fsdp2")]
    for r in runs:
        assert r["sft_steps"] == 1 and r["rl_steps"] == 1
        for key in ("accuracy", "reward", "call_attempts", "invalid_calls", "tool_responses"):
            assert len(r[key]) == 2, key
        assert isinstance(r["format_held"], bool)
        assert f"seed {r['seed']} fsdp2: accuracy" in learning["detail"]
    assert learning["data"]["pooled"]["fsdp2"]["accuracy"]["n"] == 2 * runs[0]["prompts"]
    assert (tmp_path / "out" / "report.md").read_text().count("| PASS |") == len(rows)
    assert "status" in proc.stdout  # the table is printed


def load_gpu_check() -> Any:
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "tools" / "gpu_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gpu_check", module)
    spec.loader.exec_module(module)
    return module


def fake_run(seed: int, strategy: str, gain: float, invalid: float = 0.0) -> dict[str, Any]:
    """What `learning_run` returns, for 8 prompts whose accuracy and reward rise by `gain` (0.01
    apart from prompt to prompt, so that the standard error is small but not 0)."""
    keys = ("accuracy", "reward", "tool_use", "format")
    before = {f"p{i}": dict.fromkeys(keys, 0.5) for i in range(8)}
    after = {p: {k: 0.5 + gain + 0.01 * (i % 2) for k in keys} for i, p in enumerate(before)}
    metrics = {"tool/call_attempts": 1.0, "tool/invalid_calls": 0.0, "tool/responses": 1.0}
    metrics |= {"format_ok": 1.0, "f_tau": 1.0, "tool_use_rate": 0.5}
    after_metrics = {**metrics, "tool/invalid_calls": invalid}
    both = [0.5, 0.5 + gain]
    return {
        "seed": seed,
        "strategy": strategy,
        "sft_steps": 500,
        "rl_steps": 32,
        "prompts": 8,
        "group_size": 8,
        "accuracy": both,
        "reward": both,
        "accuracy_gain": gain,
        "accuracy_gain_se": 0.01,
        "reward_gain": gain,
        "reward_gain_se": 0.01,
        **{k: [1.0, 1.0] for k in ("call_attempts", "tool_responses", "format_ok", "f_tau")},
        "invalid_calls": [0.0, invalid],
        "tool_use": [0.5, 0.5],
        "format_held": invalid <= 0.1,
        "seconds": {},
        "before": {"metrics": metrics, "per_prompt": before},
        "after": {"metrics": after_metrics, "per_prompt": after},
    }


def test_the_learning_row_pools_its_seeds_and_stops_at_the_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`row_learning` without training (each seed's run faked): the verdict per strategy is
    `learned` on the pooled gains and `format_held` on every seed, and a seed whose measured time
    does not fit the budget left is not started."""
    check = load_gpu_check()
    gains = {0: 0.5, 1: 0.5, 2: 0.5}
    invalid: dict[tuple[int, str], float] = {}
    started: list[tuple[int, str]] = []

    def run(ctx: Any, seed: int, strategy: str) -> dict[str, Any]:
        started.append((seed, strategy))
        return fake_run(seed, strategy, gains[seed], invalid.get((seed, strategy), 0.0))

    monkeypatch.setattr(check, "learning_run", run)

    def row(strategy: str, budget: float = 1e6, spent: float = 0.0) -> Any:
        args = argparse.Namespace(
            learning_sft_steps=500,
            learning_rl_steps=32,
            learning_strategy=strategy,
            learning_seeds=3,
            budget_s=budget,
        )
        ctx = SimpleNamespace(
            args=args, t0=time.monotonic() - spent, out=tmp_path, device=torch.device("cpu")
        )
        started.clear()
        return check.row_learning(ctx)

    r = row("both")
    assert r.status == "PASS" and r.check == "learning"
    assert started == [(s, k) for s in range(3) for k in ("fsdp2", "none")]
    assert r.data["seeds_run"] == [0, 1, 2] and r.data["pooled"]["none"]["accuracy"]["n"] == 24
    assert "seed 2 none: accuracy 0.500 -> 1.000" in r.detail
    # one seed in the invalid-call hole fails its strategy, and so the row
    invalid[(1, "none")] = 0.5
    r = row("both")
    assert r.status == "FAIL"
    assert r.data["pooled"]["fsdp2"]["pass"] and not r.data["pooled"]["none"]["pass"]
    assert "[format NOT held]" in r.detail
    # no gain: not learned
    gains.update({0: 0.0, 1: 0.0, 2: 0.0})
    assert row("fsdp2").status == "FAIL"
    # the budget: seed 0 always runs; seed 1 does not fit what is left
    monkeypatch.setattr(check, "learning_run", lambda *a: (time.sleep(0.05), run(*a))[1])
    r = row("fsdp2", budget=10.0, spent=10.0 - 0.02)
    assert started == [(0, "fsdp2")] and r.data["seeds_run"] == [0]
    assert "seeds 1..2 not started" in r.detail and "1 of 3 seeds" in r.detail
