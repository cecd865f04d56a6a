"""`paravt-train doctor`: reports no CUDA on a CPU machine, the cuDNN versions behind the SGLang
multimodal hang, healthy and unreachable servers, and exits 1 when anything fails."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from paravt.train import doctor
from paravt.train.cli import main


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = int(s.getsockname()[1])
    s.close()
    return port


def test_without_cuda_the_doctor_says_so_and_fails(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert "[FAIL] cuda: no CUDA" in out and "1 problem(s)" in out


@pytest.mark.parametrize(
    ("torch_version", "raw", "level"),
    [
        ("2.9.1", 91300, "FAIL"),  # 9.13: the Conv3d fallback
        ("2.9.1", 91500, "OK"),
        ("2.10.0", 92400, "OK"),
        ("2.8.0", 91000, "OK"),  # before torch 2.9 the fallback does not apply
        ("2.9.0", None, "WARN"),
    ],
)
def test_cudnn_below_9_15_with_torch_2_9_is_a_failure(
    torch_version: str, raw: int | None, level: str
) -> None:
    finding = doctor.check_cudnn(torch_version, raw)
    assert finding.level == level
    if level == "FAIL":
        assert "9.13.0" in finding.detail and "9.15" in finding.detail


def test_servers_are_checked_by_url(tiny_model_path: Path) -> None:
    from paravt.core.fake_sglang import serve

    server = serve(tiny_model_path)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        live = f"http://127.0.0.1:{server.server_port}"
        dead = f"http://127.0.0.1:{_closed_port()}"
        ok, gone = doctor.check_servers([live, dead], timeout_s=2)
    finally:
        server.shutdown()
    assert ok.level == "OK" and "weight version default" in ok.detail
    assert gone.level == "FAIL" and dead in gone.what and "sglang.launch_server" in gone.detail


def test_a_recipes_server_urls_are_checked() -> None:
    assert doctor.recipe_urls("paragrpo_8b", []) == ["http://127.0.0.1:30000"]
    assert doctor.recipe_urls("tiny_paragrpo", []) == []
