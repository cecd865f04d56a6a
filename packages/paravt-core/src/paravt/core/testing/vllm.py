"""A real vLLM server (its CPU build) on a local checkpoint, for tests, benchmarks and experiments.

One way to start it, used by `integrations/with_vllm/conftest.py`, `bench/bench_async_vllm.py`,
`bench/bench_eval_driver.py` and `experiments/async_staleness.py --engine vllm`. The server runs
as a person would start vLLM 0.32's CPU build (`nox -s real_server` builds its venv and passes its
python as `PARAVT_VLLM_PYTHON`):

    VLLM_HOST_IP=127.0.0.1 VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=nobind \\
    VLLM_SERVER_DEV_MODE=1 python -m vllm.entrypoints.openai.api_server \\
        --model DIR --served-model-name tiny --host 127.0.0.1 --port P --dtype float32 \\
        --max-model-len 16384 --allowed-local-media-path / --logprobs-mode processed_logprobs \\
        --no-enable-chunked-prefill --max-num-batched-tokens 16384

Why each flag: `vllm serve` crashed on these CPUs, the module entry point does not; the video_url
channel sends `file://` URLs, which vLLM refuses without `--allowed-local-media-path`;
`VLLM_SERVER_DEV_MODE=1` opens `/collective_rpc`, `/pause` and `/resume`, which the weight reload
uses; float32 so that its log-probs can be compared with the trainer's; `processed_logprobs` so
that sampled log-probs are those of the sampling temperature (vLLM's default returns them at
temperature 1), as the RL rollout engine requires; no chunked prefill (and a batch budget of a
whole context), because the CPU build's engine dies on a seeded request whose prefill is cut in
chunks (vLLM 0.32: `gen.set_offset` on a CPU generator, "CPU Generator does not use offset",
then `EngineDeadError` for every request; seen with 32 seeded RL rollouts of ~300-token prompts in
flight; `chunked_prefill=True` keeps vLLM's default, for a benchmark of unseeded requests).
`extra_args` appends more (a benchmark's
`--no-enable-prefix-caching`, say).

    with serve_vllm(python, checkpoint, log) as server:
        ...  # server.root ("http://127.0.0.1:P"), server.base_url (root + "/v1")

If the server exits or does not answer `/health` within `start_s`, `VLLMStartError` says so with
the end of its log. On leaving, the server's process group gets SIGTERM, then SIGKILL after 30 s.
Needs `httpx` (paravt-core's `openai` or `sglang` extra).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

SERVED_NAME = "tiny"
MAX_MODEL_LEN = 16384
DEFAULT_START_S = 420.0
ENV = {
    "VLLM_HOST_IP": "127.0.0.1",
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB of KV cache
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",  # shared machines: no pinning to cores others use
    "HF_HUB_OFFLINE": "1",
}


class VLLMStartError(RuntimeError):
    """The vLLM server exited or did not become healthy; the message ends with its log's tail."""


@dataclass(frozen=True)
class VLLMServerProcess:
    """A running server: its URLs, the served model name, the checkpoint and the log file."""

    root: str  # http://127.0.0.1:P
    base_url: str  # root + /v1, OpenAI-compatible
    model: str
    checkpoint: Path
    log: Path
    pid: int


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def log_tail(log: Path, n: int = 60) -> str:
    """The last `n` lines of a log file ('' when it does not exist)."""
    lines = log.read_text(errors="replace").splitlines() if log.is_file() else []
    return "\n".join(lines[-n:])


def vllm_command(
    python: str | Path,
    checkpoint: str | Path,
    port: int,
    *,
    served_name: str = SERVED_NAME,
    extra_args: Sequence[str] = (),
    chunked_prefill: bool = False,
) -> list[str]:
    """The server's command line (see the module docstring for why each flag)."""
    no_chunks = ["--no-enable-chunked-prefill", "--max-num-batched-tokens", str(MAX_MODEL_LEN)]
    return [
        str(python), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(checkpoint), "--served-model-name", served_name,
        "--host", "127.0.0.1", "--port", str(port),
        "--dtype", "float32", "--max-model-len", str(MAX_MODEL_LEN),
        "--allowed-local-media-path", "/",
        "--logprobs-mode", "processed_logprobs",
        *([] if chunked_prefill else no_chunks),
        *extra_args,
    ]  # fmt: skip


@contextmanager
def serve_vllm(
    python: str | Path,
    checkpoint: str | Path,
    log: str | Path,
    *,
    served_name: str = SERVED_NAME,
    extra_args: Sequence[str] = (),
    dev_mode: bool = True,
    chunked_prefill: bool = False,
    start_s: float | None = None,
    env: dict[str, str] | None = None,
) -> Iterator[VLLMServerProcess]:
    """Start vLLM on `checkpoint` with `python` (a venv with vllm-cpu), wait for `/health`, yield
    the running server, stop it on leaving. `start_s` defaults to `PARAVT_VLLM_START_S` or 420 s.
    `dev_mode=False` leaves `/collective_rpc` and the pause routes closed (no weight reloads);
    `chunked_prefill=True` keeps vLLM's chunked prefill (unseeded requests only, see above)."""
    import httpx

    log = Path(log)
    log.parent.mkdir(parents=True, exist_ok=True)
    if start_s is None:
        start_s = float(os.environ.get("PARAVT_VLLM_START_S", DEFAULT_START_S))
    port = free_port()
    full_env = {**os.environ, **(env or {}), **ENV}
    if dev_mode:
        full_env["VLLM_SERVER_DEV_MODE"] = "1"
    cmd = vllm_command(
        python,
        checkpoint,
        port,
        served_name=served_name,
        extra_args=extra_args,
        chunked_prefill=chunked_prefill,
    )
    root = f"http://127.0.0.1:{port}"
    with log.open("w") as sink:
        proc = subprocess.Popen(
            cmd, stdout=sink, stderr=subprocess.STDOUT, env=full_env, start_new_session=True
        )
    try:
        t0 = time.monotonic()
        while True:
            if proc.poll() is not None:
                raise VLLMStartError(
                    f"the vLLM server ({python}) exited with code {proc.returncode} before it was "
                    f"healthy; its log ({log}) ends:\n{log_tail(log)}"
                )
            try:
                if httpx.get(root + "/health", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() - t0 > start_s:
                raise VLLMStartError(
                    f"the vLLM server did not answer {root}/health in {start_s:.0f} s "
                    f"(PARAVT_VLLM_START_S); its log ({log}) ends:\n{log_tail(log)}"
                )
            time.sleep(2)
        yield VLLMServerProcess(root, root + "/v1", served_name, Path(checkpoint), log, proc.pid)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
