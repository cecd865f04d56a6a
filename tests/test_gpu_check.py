"""tools/gpu_check.py, rehearsed on the CPU (`--device cpu --size tiny`, tiny step counts): the
script a person runs on a GPU must keep working between GPU runs. It goes through the path the GPU
machine takes: frames predecoded into the data folder, torchcodec blocked for the whole check. A
PASS here says the rows run; it says nothing about CUDA (the env row says so)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

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
    cmd += ["--learning-sft-steps", "2", "--learning-rl-steps", "1", "--eval-prompts", "2"]
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
    assert "not a verdict" in rows["learning (rehearsal)"]["detail"]
    assert (tmp_path / "out" / "report.md").read_text().count("| PASS |") == len(rows)
    assert "status" in proc.stdout  # the table is printed
