"""A real vLLM server (CPU build) on the tiny checkpoint, started once for the session and stopped.

`nox -s real_server` builds the server's venv and passes its python as `PARAVT_VLLM_PYTHON`. The
server is started by `paravt.core.testing.vllm.serve_vllm` (its docstring has the command line and
why each flag). If the server does not answer `/health` in `PARAVT_VLLM_START_S` (default 420 s),
or exits, the fixture fails with the tail of the server's log.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from paravt.core.testing.vllm import VLLMStartError, serve_vllm

SERVED_NAME = "tiny"
PY = sys.executable


@dataclass
class Served:
    root: str  # http://127.0.0.1:P
    base_url: str  # root + /v1 (OpenAI-compatible)
    model: str
    checkpoint: Path
    log: Path


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tiny") / "model"
    subprocess.run([PY, "-m", "paravt.core.cli", "build-tiny", "--out", str(out)], check=True)
    return out


@pytest.fixture(scope="session")
def vllm_server(
    tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    python = os.environ.get("PARAVT_VLLM_PYTHON")
    if not python:
        pytest.fail(
            "PARAVT_VLLM_PYTHON is not set: these tests run a real vLLM server; run them with "
            "`nox -s real_server`, which builds the server's venv"
        )
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    t0 = time.monotonic()
    try:
        with serve_vllm(python, tiny_checkpoint, log, served_name=SERVED_NAME) as server:
            print(f"\nvLLM server healthy at {server.root} after {time.monotonic() - t0:.0f} s")
            yield Served(server.root, server.base_url, SERVED_NAME, tiny_checkpoint, log)
    except VLLMStartError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="session")
def synth_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("synth")
    subprocess.run(
        [PY, "-m", "paravt.tools.cli", "synth", "--out", str(out), "--n", "4", "--duration", "20"],
        check=True,
    )
    return out


@pytest.fixture(scope="session")
def offline_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return env
