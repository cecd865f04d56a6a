"""`paravt.core.testing.vllm.serve_vllm`, the one way tests, benchmarks and experiments start vLLM.

A real vLLM server runs only in `nox -s real_server`; here a stand-in "python" takes vLLM's command
line and either answers `/health` on the port it was given or exits, so the launcher's contract
(the command line, the environment, waiting for health, a named failure with the log, stopping
the process group) is checked without vLLM.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

pytest.importorskip("httpx")

from paravt.core.testing.vllm import VLLMStartError, serve_vllm

HEALTHY = """
import json, os, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
argv = sys.argv[1:]
port = int(argv[argv.index("--port") + 1])
with open(os.environ["FAKE_VLLM_RECORD"], "w") as f:
    json.dump({"argv": argv, "env": {k: v for k, v in os.environ.items() if k.startswith("VLLM")},
               "pid": os.getpid()}, f)
print("fake vLLM starting", flush=True)
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
    def log_message(self, *a):
        pass
HTTPServer(("127.0.0.1", port), H).serve_forever()
"""

CRASHING = """
import sys
print("RuntimeError: no CPU backend for this model (fake)", flush=True)
sys.exit(3)
"""


def fake_python(tmp_path: Path, body: str) -> Path:
    """An executable that runs `body` with this interpreter, whatever arguments it is given."""
    script = tmp_path / "fake_server.py"
    script.write_text(body)
    exe = tmp_path / "python"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{script}" "$@"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def test_serve_vllm_starts_waits_for_health_and_stops_the_server(tmp_path, monkeypatch):
    import httpx

    record = tmp_path / "record.json"
    monkeypatch.setenv("FAKE_VLLM_RECORD", str(record))
    exe = fake_python(tmp_path, HEALTHY)
    with serve_vllm(
        exe, tmp_path / "ckpt", tmp_path / "logs" / "server.log", extra_args=("--x", "1")
    ) as server:
        assert httpx.get(server.root + "/health", timeout=5).status_code == 200
        assert server.base_url == server.root + "/v1" and server.model == "tiny"
        seen = json.loads(record.read_text())
        argv = seen["argv"]
        assert argv[:2] == ["-m", "vllm.entrypoints.openai.api_server"]
        assert argv[argv.index("--model") + 1] == str(tmp_path / "ckpt")
        assert argv[argv.index("--dtype") + 1] == "float32"
        assert argv[argv.index("--logprobs-mode") + 1] == "processed_logprobs"
        assert argv[-2:] == ["--x", "1"]
        # seeded RL requests kill the CPU build's engine when a prefill is chunked
        assert "--no-enable-chunked-prefill" in argv
        assert (
            argv[argv.index("--max-num-batched-tokens") + 1]
            == argv[argv.index("--max-model-len") + 1]
        )
        assert seen["env"]["VLLM_SERVER_DEV_MODE"] == "1"
        assert seen["env"]["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"
        pid = seen["pid"]
    with pytest.raises(ProcessLookupError):  # stopped and reaped on leaving
        os.kill(pid, 0)
    assert "fake vLLM starting" in (tmp_path / "logs" / "server.log").read_text()


def test_serve_vllm_without_dev_mode_or_with_chunked_prefill_as_asked(tmp_path, monkeypatch):
    record = tmp_path / "record.json"
    monkeypatch.setenv("FAKE_VLLM_RECORD", str(record))
    monkeypatch.delenv("VLLM_SERVER_DEV_MODE", raising=False)
    with serve_vllm(
        fake_python(tmp_path, HEALTHY),
        tmp_path,
        tmp_path / "s.log",
        dev_mode=False,
        chunked_prefill=True,
    ):
        seen = json.loads(record.read_text())
        assert "VLLM_SERVER_DEV_MODE" not in seen["env"]
        assert "--no-enable-chunked-prefill" not in seen["argv"]


def test_a_server_that_exits_is_a_named_error_with_its_log(tmp_path):
    exe = fake_python(tmp_path, CRASHING)
    with (
        pytest.raises(VLLMStartError, match=r"(?s)exited with code 3.*no CPU backend"),
        serve_vllm(exe, tmp_path / "ckpt", tmp_path / "s.log", start_s=60),
    ):
        pytest.fail("the context must not be entered")


def test_a_server_that_never_gets_healthy_times_out_with_its_log(tmp_path):
    exe = fake_python(tmp_path, "import time\nprint('loading', flush=True)\ntime.sleep(60)\n")
    with (
        pytest.raises(VLLMStartError, match=r"(?s)did not answer .*/health in 3 s.*loading"),
        serve_vllm(exe, tmp_path / "ckpt", tmp_path / "s.log", start_s=3),
    ):
        pytest.fail("the context must not be entered")
