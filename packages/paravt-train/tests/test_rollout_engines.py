"""Rollout engines behind one interface (`paravt.train.rl.engines`): a new engine is one class and
one registration. A toy engine, defined and registered in this file, runs two RL steps: built from
the recipe, the starting weights and each step's weights loaded as buckets with a version,
verified, its memory released before each update, its metrics in every row, closed at the end.
Also: the registry's rules, the built-in registrations, and the weight check both server clients
share (`paravt.core.engines.ServerWeights.check_weights`)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch

from paravt.core.engines import HFEngine, ServerWeights
from paravt.train.modeling import load_model_and_processor
from paravt.train.recipe import RecipeError, RolloutSpec, load_recipe
from paravt.train.rl import (
    EngineContext,
    RolloutEngine,
    WeightCheck,
    engine_names,
    register_engine,
    train_rl,
)
from paravt.train.rl.engines import Bucket, build_engine

from .rl_helpers import EveryOtherScripted, examples
from .test_rl import tiny_rl_recipe


class CountingHF(HFEngine):
    """`HFEngine` that counts the trajectories it continued."""

    requests = 0

    async def generate(self, trajectories: Any, *args: Any, **kwargs: Any) -> Any:
        self.requests += len(trajectories)
        return await super().generate(trajectories, *args, **kwargs)


class ToyEngine(RolloutEngine):
    """A rollout engine on its own copy of the policy, which records every call it gets."""

    built: ClassVar[list[ToyEngine]] = []

    def __init__(self, model: Any, processor: Any, policy: Any) -> None:
        self.model = model
        self.engine = CountingHF(model, processor)
        self.policy = policy  # the backend's module: what `verify` compares with
        self.calls: list[str] = []
        self.started = {k: v.clone() for k, v in model.state_dict().items()}

    @classmethod
    def check_spec(cls, rollout: RolloutSpec) -> list[str]:
        """Its own rule for the recipe, judged while the recipe loads."""
        problems = super().check_spec(rollout)  # the interface's: none (staleness: registry)
        if rollout.server.urls:
            problems.append("rollout.engine=toy talks to no server: leave rollout.server.urls out")
        return problems

    @classmethod
    def build(cls, ctx: EngineContext) -> ToyEngine:
        model, _ = load_model_and_processor(
            ctx.recipe.model, ctx.device, path=ctx.model_path, dtype=torch.float32
        )
        engine = cls(model.requires_grad_(False).eval(), ctx.processor, ctx.backend.model)
        cls.built.append(engine)
        return engine

    def before_update(self) -> None:
        self.calls.append("before_update")

    def load_weights(self, buckets: Iterable[Bucket], version: str) -> None:
        self.calls.append(f"load {version}")
        targets = self.model.state_dict()
        with torch.no_grad():
            for bucket in buckets:
                for name, tensor in bucket:
                    targets[name].copy_(tensor)

    def verify(self, version: str) -> WeightCheck:
        self.calls.append(f"verify {version}")
        policy = self.policy.state_dict()
        diffs = [float((t - policy[n]).abs().max()) for n, t in self.model.state_dict().items()]
        return WeightCheck(max(diffs))

    def metrics(self) -> dict[str, float]:
        return {"toy/requests": float(self.engine.requests)}

    def close(self) -> None:
        self.calls.append("close")


register_engine("toy", ToyEngine)  # the one registration a new engine needs


def toy_recipe(model: Path, out: Path, *extra: str) -> Any:
    # registered above, so a recipe (here an override) names it like a built-in engine
    return tiny_rl_recipe(model, out, "checkpoint.save_final=false", "rollout.engine=toy", *extra)


@pytest.mark.slow
def test_a_toy_engine_registered_here_runs_two_rl_steps(
    tiny_model_path: Path, tmp_path: Path
) -> None:
    ToyEngine.built.clear()
    exs, frames = examples()
    recipe = toy_recipe(tiny_model_path, tmp_path / "run")
    train_rl(recipe, examples=exs, frames=frames, wrap_engine=EveryOtherScripted)
    (toy,) = ToyEngine.built
    assert toy.calls == [
        "load step-0",
        "verify step-0",
        "before_update",
        "load step-1",
        "verify step-1",
        "before_update",
        "load step-2",
        "verify step-2",
        "close",
    ]
    assert toy.engine.requests > 0  # the rollouts were generated on the toy engine
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        assert row["toy/requests"] > 0  # the engine's metrics are in every row
        assert row["sync/logprob_max_abs_diff"] == 0.0  # it holds the policy's weights
        assert row["sync/push_s"] >= 0.0
    # the weights it holds are the trained ones, not the ones it started from
    now = toy.model.state_dict()
    assert any(not torch.equal(now[k], toy.started[k]) for k in now)


def test_the_registry_names_the_built_in_engines_and_refuses_a_second_under_a_taken_name() -> None:
    assert {"hf", "sglang_server", "vllm_server", "toy"} <= set(engine_names())
    register_engine("toy", ToyEngine)  # the same one again: nothing changes
    with pytest.raises(ValueError, match="registered as 'toy' already"):
        register_engine("toy", lambda ctx: ToyEngine.build(ctx))


def test_a_registered_engine_judges_the_recipe_that_names_it(tmp_path: Path) -> None:
    assert toy_recipe(tmp_path / "m", tmp_path / "run").rollout.engine == "toy"
    with pytest.raises(RecipeError, match=r"rollout\.engine=toy talks to no server"):
        toy_recipe(tmp_path / "m", tmp_path / "run", "rollout.server.urls=[http://127.0.0.1:1]")
    with pytest.raises(
        RecipeError,
        match=r"rollout\.engine=toy does not \(it cannot tell which weights produced a reply\)",
    ):
        toy_recipe(
            tmp_path / "m", tmp_path / "run", "rollout.max_staleness=1", "loss.decoupled=true"
        )


def test_an_unregistered_engine_name_is_an_error_listing_the_registered_ones() -> None:
    recipe = load_recipe("tiny_paragrpo", [])
    recipe = recipe.model_copy(
        update={"rollout": recipe.rollout.model_copy(update={"engine": "nope"})}
    )
    ctx = EngineContext(recipe, None, None, Path("."), torch.device("cpu"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"rollout.engine='nope' .*hf, sglang_server"):
        build_engine(ctx)


class FakeServers(ServerWeights):
    """The server side of `check_weights`: versions and scores as the test sets them."""

    server_name = "Fake"
    server_errors = (ConnectionError,)

    def __init__(self, versions: dict[str, str | None], scores: list[float]) -> None:
        self.weight_urls = list(versions)
        self.versions = versions
        self.scores = scores

    def server_weight_versions(self) -> dict[str, str | None]:
        return self.versions

    def score(self, token_ids: Sequence[int], *, url: str | None = None) -> list[float]:
        if url == "http://down":
            raise ConnectionError("http://down did not answer")
        return self.scores


def test_the_weight_check_both_server_clients_share_names_what_is_wrong() -> None:
    ids, mine = [1, 2, 3], [-1.0, -2.0]
    ok = FakeServers({"http://a": "step-1"}, [-1.0, -2.0005])
    diff, problem = ok.check_weights("step-1", ids, mine, tolerance=1e-3)
    assert problem == "" and diff == pytest.approx(5e-4)

    diff, problem = ok.check_weights("step-2", ids, mine, tolerance=1e-3)
    assert math.isnan(diff)
    assert problem == "Fake server http://a serves weight version 'step-1', expected 'step-2'"

    far = FakeServers({"http://a": "step-1"}, [-1.0, -2.5])
    diff, problem = far.check_weights("step-1", ids, mine, tolerance=1e-3)
    assert diff == pytest.approx(0.5) and "as expected, but its log-probs" in problem

    nan = FakeServers({"http://a": "step-1"}, [math.nan, -2.0])
    diff, problem = nan.check_weights("step-1", ids, mine, tolerance=1e-3)
    assert math.isnan(diff) and "differ from the trainer's by up to nan" in problem

    short = FakeServers({"http://a": "step-1"}, [-1.0])
    assert (
        "scored 1 tokens of a fixed sequence, the trainer 2"
        in short.check_weights("step-1", ids, mine, tolerance=1e-3)[1]
    )

    down = FakeServers({"http://down": "step-1"}, [])
    diff, problem = down.check_weights("step-1", ids, mine, tolerance=1e-3)
    assert math.isnan(diff) and problem == "http://down did not answer"
