"""No silent failure at the rollout-server boundary, in one process against the stand-in server
(`paravt.core.testing.stand_in`, in a thread): a weight push the server does not take is pushed once
more and then stops the run with an error naming the server and both weight versions; a server
that stops answering mid-run ends the run with an error naming it and leaves the last checkpoint
for --resume."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from paravt.core.engines.sglang_server import ServerError
from paravt.core.testing.stand_in import serve
from paravt.train.checkpoint import latest_checkpoint
from paravt.train.distributed import Backend
from paravt.train.modeling import load_model_and_processor
from paravt.train.recipe import load_recipe
from paravt.train.rl import WeightPublisher, WeightSyncError, train_rl

from .rl_helpers import examples


@pytest.fixture
def server(tiny_model_path: Path) -> Iterator[Any]:
    srv = serve(tiny_model_path)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()


def url_of(srv: Any) -> str:
    return f"http://127.0.0.1:{srv.server_port}"


def server_recipe(model: Path, out: Path, url: str, *extra: str) -> Any:
    return load_recipe(
        "tiny_paragrpo",
        [
            f"model.path={model}",
            f"output_dir={out}",
            "rollout.engine=sglang_server",
            f"rollout.server.urls=[{url}]",
            "rollout.server.retries=0",
            "rollout.server.timeout_s=60",
            "rollout.server.verify_sync=true",
            "rollout.server.verify_sync_tolerance=1e-3",
            "rollout.batch_prompts=2",
            "rollout.group_size=2",
            "rollout.max_new_tokens=8",
            "rollout.subagent_max_new_tokens=4",
            "rollout.max_turns=2",
            "gating.choices=[2,4]",
            "logging.progress=false",
            *extra,
        ],
    )


def weight_publisher(recipe: Any, model: Path) -> WeightPublisher:
    """The trainer's side of a one-process run (fp32 on CPU); pushes step-0 as it starts."""
    device = torch.device("cpu")
    net, processor = load_model_and_processor(recipe.model, device, path=model, dtype=torch.float32)
    backend = Backend(
        net, recipe.distributed, recipe.optim, recipe.max_steps, compute_dtype=torch.float32
    )
    return WeightPublisher(recipe, backend, processor, model, device)


def fail_loads(fake: Any, times: int | None, *, tag: bool = False) -> list[str]:
    """Make the stand-in answer success to the first `times` weight loads (all: None) without
    loading anything (with `tag`, it still reports the new version); the versions asked for."""
    load = fake.update_weights_from_disk
    asked: list[str] = []

    def pretend(body: dict[str, Any]) -> dict[str, Any]:
        asked.append(body["weight_version"])
        if times is not None and len(asked) > times:
            return load(body)
        if tag:
            fake.weight_version = body["weight_version"]
        return {"success": True, "message": "pretended to load"}

    fake.update_weights_from_disk = pretend
    return asked


def test_a_push_the_server_does_not_take_is_retried_once_then_stops_the_run(
    server: Any, tiny_model_path: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = url_of(server)
    asked = fail_loads(server.fake, None)
    recipe = server_recipe(tiny_model_path, tmp_path / "run", url)
    with (
        caplog.at_level(logging.WARNING, logger="paravt.train"),
        pytest.raises(WeightSyncError) as info,
    ):
        weight_publisher(recipe, tiny_model_path)
    message = str(info.value)
    assert url in message and "'default'" in message and "'step-0'" in message
    assert asked == ["step-0", "step-0"]  # pushed once more, then stopped
    assert any("pushing step-0 again" in r.getMessage() for r in caplog.records)


def test_a_push_that_fails_once_is_repaired_by_the_second(
    server: Any, tiny_model_path: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = url_of(server)
    asked = fail_loads(server.fake, 1)
    recipe = server_recipe(tiny_model_path, tmp_path / "run", url)
    with caplog.at_level(logging.WARNING, logger="paravt.train"):
        publisher = weight_publisher(recipe, tiny_model_path)
        with torch.no_grad():
            for p in publisher.backend.model.parameters():
                p.add_(torch.randn_like(p) * 0.05)
        metrics = publisher.sync()
    assert asked == ["step-0", "step-0", "step-1"]
    assert server.fake.weight_version == "step-1"
    assert metrics["sync/logprob_max_abs_diff"] < 1e-3  # the server holds the trainer's weights
    retries = [r.getMessage() for r in caplog.records if "again" in r.getMessage()]
    assert len(retries) == 1 and "serves weight version 'default', expected 'step-0'" in retries[0]


def test_a_server_that_reports_the_version_but_holds_other_weights_stops_the_run(
    server: Any, tiny_model_path: Path, tmp_path: Path
) -> None:
    url = url_of(server)
    recipe = server_recipe(tiny_model_path, tmp_path / "run", url)
    publisher = weight_publisher(recipe, tiny_model_path)  # step-0 loads for real
    asked = fail_loads(server.fake, None, tag=True)
    with torch.no_grad():  # what an optimiser step would do
        for p in publisher.backend.model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    with pytest.raises(WeightSyncError, match=rf"{url} serves weight version 'step-1' as expected"):
        publisher.sync()
    assert asked == ["step-1", "step-1"]


def test_a_server_that_stops_answering_ends_the_run_naming_it_and_keeps_the_last_checkpoint(
    server: Any, tiny_model_path: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = url_of(server)
    out = tmp_path / "run"
    recipe = server_recipe(
        tiny_model_path,
        out,
        url,
        "max_steps=3",
        "checkpoint.every_steps=1",
        "rollout.server.verify_sync=false",
        "rollout.server.stall_warn_s=0.2",
        "rollout.server.stall_dead_s=1.5",
    )
    hang, release = threading.Event(), threading.Event()
    generate = server.fake.generate

    def stalled(body: dict[str, Any]) -> dict[str, Any]:
        if hang.is_set():  # accept the request, answer nothing until the test ends
            release.wait(30)
            raise ValueError("the test is over")
        return generate(body)

    server.fake.generate = stalled

    def after(step: int, *_: Any) -> None:
        if step == 1:
            hang.set()

    exs, frames = examples()
    try:
        with (
            caplog.at_level(logging.WARNING),
            pytest.raises(ServerError, match=rf"{url} sent nothing back .* declared dead"),
        ):
            train_rl(recipe, examples=exs, frames=frames, on_step=after)
    finally:
        release.set()
    last = latest_checkpoint(out)
    assert last == out / "checkpoints" / "step-000001"
    assert torch.load(last / "trainer_state.pt", weights_only=False)["step"] == 1
    assert not (out / "final").exists()
    stalls = [r.getMessage() for r in caplog.records if "has sent nothing back" in r.getMessage()]
    assert stalls and all(url in s for s in stalls)
    (stopped,) = [r.getMessage() for r in caplog.records if "RL stopped" in r.getMessage()]
    assert "step 2" in stopped and str(last) in stopped and "--resume" in stopped
