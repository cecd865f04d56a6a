"""The CPU rehearsal of a node whose rollouts run on an SGLang server: two trainer ranks under
torchrun (FSDP2 on gloo) and our stand-in server process (`python -m
paravt.core.testing.stand_in`, the SGLang native API subset over the tiny Qwen3-VL), rollout.engine=sglang_server.

What it proves: 3 RL steps end to end with no hang; weights pushed from rank 0 after every step
(versions step-0..step-3; with colocate, memory released for the update and resumed before the
push) and the server generating with them (every reply's weight version checked
by the engine; the server counts requests per version); after each push the server's log-probs of
a fixed sequence change and equal the trainer's weights' at that step (checkpoints); a server
killed mid-run ends training with an error naming it, not a hang. What it cannot prove: anything
about a real SGLang server (its image expansion, its log-prob conventions, NCCL weight sync)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch

from paravt.core.testing.stand_in import spawn

DRIVER = Path(__file__).parent / "server_rehearsal_driver.py"
BOUND_S = 240


def _env() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}


def start_server(model: Path, tmp: Path) -> tuple[subprocess.Popen[bytes], str]:
    """The stand-in server on a free port, answering /health."""
    return spawn(model, tmp / "server.log", env=_env(), timeout_s=90)


def trainers(model: Path, out: Path, url: str, steps: int, *overrides: str) -> list[str]:
    torchrun = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))
    cmd = [torchrun, "--nproc_per_node", "2", str(DRIVER), str(model), str(out), url, str(steps)]
    return cmd + list(overrides)


def train_through_a_server(
    model: Path, tmp: Path, out: Path, steps: int, *overrides: str
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """`steps` RL steps of two torchrun trainers against a fresh stand-in server; what the server
    was asked to do (`/fake/events`) and the generations it served per weight version."""
    server, url = start_server(model, tmp)
    try:
        done = subprocess.run(
            trainers(model, out, url, steps, *overrides),
            env=_env(),
            capture_output=True,
            timeout=BOUND_S,
        )
        assert done.returncode == 0, done.stderr.decode()[-5000:]
        return httpx.get(url + "/fake/events").json(), httpx.get(url + "/fake/generated").json()
    finally:
        server.kill()
        server.wait()


def probe_logprobs(model: Path, weights: Path | None, ids: list[int]) -> list[float]:
    """The trainer's log-probs of `ids` with the model's weights replaced by `weights`."""
    from safetensors.torch import load_file
    from transformers import AutoModelForImageTextToText

    net = AutoModelForImageTextToText.from_pretrained(model).eval()
    if weights is not None:
        net.load_state_dict(load_file(str(weights)), strict=False)
    x = torch.tensor([ids])
    with torch.no_grad():
        logits = net(input_ids=x).logits[0, :-1].float()
    return torch.log_softmax(logits, -1).gather(-1, x[0, 1:, None]).squeeze(-1).tolist()


@pytest.mark.slow
def test_three_rl_steps_through_the_server_push_weights_it_then_generates_with(
    tiny_model_path: Path, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    events, generated = train_through_a_server(tiny_model_path, tmp_path, out, 3)

    updates = [e for e in events if e["event"] == "update_weights_from_disk"]
    assert [u["weight_version"] for u in updates] == ["step-0", "step-1", "step-2", "step-3"]
    # colocate: memory released for every update and taken back before the push
    order = [e["event"].split("_")[0] for e in events[1:]]
    assert order == ["resume", "update"] + ["release", "resume", "update"] * 3
    # rollouts of step k+1 ran on the weights pushed after step k, and on nothing else
    assert set(generated) == {"step-0", "step-1", "step-2"} and min(generated.values()) >= 4

    ids = events[0]["probe_ids"]
    ckpts = [None] + [
        out / "checkpoints" / f"step-{k:06d}" / "model.safetensors" for k in (1, 2, 3)
    ]
    previous = events[0]["probe_logprobs"]
    for update, ckpt in zip(updates, ckpts):
        server_lp = update["probe_logprobs"]
        trainer_lp = probe_logprobs(tiny_model_path, ckpt, ids)
        assert server_lp == pytest.approx(trainer_lp, abs=1e-4), update["weight_version"]
        if ckpt is not None:  # each optimiser step moved the server's weights
            assert max(abs(a - b) for a, b in zip(server_lp, previous)) > 1e-3
        previous = server_lp

    import json

    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all(r["sync/logprob_max_abs_diff"] < 1e-4 for r in rows)  # the in-run check agrees
    assert len(list((out / "rollout_weights").iterdir())) == 1  # older versions removed


@pytest.mark.slow
def test_asynchronous_rollouts_run_ahead_of_training_within_the_staleness_bound(
    tiny_model_path: Path, tmp_path: Path
) -> None:
    """rollout.max_staleness=1 (the reference trains with 2): each rank's next step generates
    while this one trains; the server pauses around every weight load; still no hang, and the
    server's weights after each push are the trainer's."""
    out = tmp_path / "run"
    overrides = ["rollout.max_staleness=1", "rollout.server.colocate=false", "loss.decoupled=true"]
    events, generated = train_through_a_server(tiny_model_path, tmp_path, out, 4, *overrides)

    import json

    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    staleness = [r["rollout/staleness"] for r in rows]
    assert all(0 <= s <= 1 for s in staleness), staleness
    assert staleness[0] == 0 and max(staleness) == 1, staleness  # later steps ran ahead
    assert all(r["sync/logprob_max_abs_diff"] < 1e-4 for r in rows)
    # every load is wrapped in a pause (rollout.server.pause_mode: retract)
    kinds = [e["event"] for e in events[1:]]
    assert kinds == ["pause_generation", "update_weights_from_disk", "continue_generation"] * 5
    assert {e["mode"] for e in events if e["event"] == "pause_generation"} == {"retract"}
    updates = [e for e in events if e["event"] == "update_weights_from_disk"]
    assert [u["weight_version"] for u in updates] == [f"step-{k}" for k in range(5)]
    assert set(generated) <= {"step-0", "step-1", "step-2", "step-3"}
    ids = events[0]["probe_ids"]
    for update, k in zip(updates[1:], (1, 2, 3, 4)):
        ckpt = out / "checkpoints" / f"step-{k:06d}" / "model.safetensors"
        trainer_lp = probe_logprobs(tiny_model_path, ckpt, ids)
        assert update["probe_logprobs"] == pytest.approx(trainer_lp, abs=1e-4), k


@pytest.mark.slow
def test_a_killed_server_stops_training_with_an_error_naming_it_not_a_hang(
    tiny_model_path: Path, tmp_path: Path
) -> None:
    server, url = start_server(tiny_model_path, tmp_path)
    run = subprocess.Popen(
        trainers(tiny_model_path, tmp_path / "run", url, 50),
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + BOUND_S
        while True:  # wait until one step's weights reached the server, then kill it mid-run
            versions = [e.get("weight_version") for e in httpx.get(url + "/fake/events").json()]
            if "step-1" in versions:
                break
            if run.poll() is not None:  # say why, or a CI failure cannot be read
                try:  # a rank left behind may hold the pipe open: never wait on it for long
                    err = run.communicate(timeout=30)[1].decode()
                except subprocess.TimeoutExpired:
                    err = "(stderr still open after 30 s)"
                pytest.fail(
                    f"the trainers exited ({run.returncode}) before step 1's weights reached "
                    f"the server, which was still up:\n{err[-4000:]}"
                )
            assert time.monotonic() < deadline, f"no step-1 weights at the server in {BOUND_S} s"
            time.sleep(0.5)
        server.send_signal(signal.SIGKILL)
        server.wait()
        t0 = time.monotonic()
        _, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
        if server.poll() is None:
            server.kill()
    assert run.returncode != 0
    text = err.decode()
    assert f"SGLang server {url} did not answer" in text, text[-4000:]
    assert time.monotonic() - t0 < 120
