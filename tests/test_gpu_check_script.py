"""tools/gpu_check_sglang.py, rehearsed on the CPU against the stand-in server (`--stand-in`): the
script a person with a GPU runs must keep working; a PASS here says nothing about SGLang itself."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_gpu_check_script_runs_every_check_against_the_stand_in(tmp_path: Path) -> None:
    from paravt.core.testing import cached_tiny_qwen3vl

    model = cached_tiny_qwen3vl(seed=0)
    with socket.socket() as s:  # a free port
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    small = [
        "rollout.max_new_tokens=12",
        "rollout.subagent_max_new_tokens=8",
        "rollout.batch_prompts=2",
        "rollout.group_size=2",
        "data.synth.n=4",
    ]
    cmd = [sys.executable, str(ROOT / "tools" / "gpu_check_sglang.py"), "--model", str(model)]
    cmd += ["--out", str(tmp_path / "check"), "--stand-in", "--port", str(port)]
    cmd += ["--pause-tokens", "64", "--stall-dead-s", "20"]
    for override in small:
        cmd += ["--override", override]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = {r["check"]: r for r in json.loads((tmp_path / "check" / "report.json").read_text())}
    assert rows["gpu"]["status"] == "SKIP"
    assert all(r["status"] == "PASS" for name, r in rows.items() if name != "gpu"), rows
    assert "'step-2'" in rows["rl: 2 steps, weight sync, probe"]["detail"]
    assert "steps logged [1, 2, 3]" in rows["kill + resume"]["detail"]
    assert "check" in proc.stdout and "status" in proc.stdout  # the table is printed
