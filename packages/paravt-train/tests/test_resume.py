"""A run killed with SIGKILL mid-training resumes from its last complete checkpoint with no lost
and no repeated steps, and ends exactly where an uninterrupted run ends."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

DRIVER = Path(__file__).parent / "resume_driver.py"
STEPS = 8


def _run(model: Path, out: Path, *extra: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        [sys.executable, str(DRIVER), str(model), str(out), str(STEPS), *extra],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _rows(out: Path) -> list[dict[str, float]]:
    path = out / "metrics.jsonl"
    if not path.is_file():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


@pytest.mark.slow
def test_a_sigkilled_run_resumes_with_no_lost_or_repeated_steps(
    tiny_model_path: Path, tmp_path: Path
) -> None:
    reference = _run(tiny_model_path, tmp_path / "reference")
    _, err = reference.communicate(timeout=600)
    assert reference.returncode == 0, err.decode()[-2000:]
    expected = {r["step"]: r["loss"] for r in _rows(tmp_path / "reference")}
    assert sorted(expected) == list(range(1, STEPS + 1))

    killed = _run(tiny_model_path, tmp_path / "run")
    deadline = time.monotonic() + 600
    while len(_rows(tmp_path / "run")) < 3 and time.monotonic() < deadline:
        if killed.poll() is not None:
            pytest.fail("the run ended before it could be killed: " + killed.stderr.read().decode())
        time.sleep(0.05)
    killed.send_signal(signal.SIGKILL)
    killed.wait(timeout=60)
    assert killed.returncode == -signal.SIGKILL
    done_before = len(_rows(tmp_path / "run"))
    assert 3 <= done_before < STEPS

    resumed = _run(tiny_model_path, tmp_path / "run", "--resume")
    _, err = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, err.decode()[-2000:]
    rows = _rows(tmp_path / "run")
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))  # none lost, none repeated
    for r in rows:  # the same data, RNG and optimiser state: the same losses as without the kill
        assert r["loss"] == pytest.approx(expected[r["step"]], rel=1e-4, abs=1e-6)
    ckpts = sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir())
    assert ckpts == [f"step-{STEPS - 1:06d}", f"step-{STEPS:06d}"]  # keep_last=2, no tmp dirs
    assert (tmp_path / "run" / "final" / "model.safetensors").is_file()
