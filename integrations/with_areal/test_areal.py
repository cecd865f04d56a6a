"""AReaL's own workflows call our reward through `AsyncRewardWrapper`'s process pool.

`RLVRWorkflow` (built by the README recipe, with the reward as an object and as a dotted path)
and `MultiTurnWorkflow` run `arun_episode` against a scripted inference engine (the only stand-in:
no model is served on CPU); tokenizing, the chat template, decoding, pickling the reward into the
pool and the retry loop are AReaL's. The episode rewards must equal `paravt.rewards.score`.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import pickle
from typing import Any

import pytest
from shared import CASES, Case, direct, readme_block, readme_tested_version, tokenizer_dir

from paravt.rewards.integrations import TESTED_VERSIONS
from paravt.rewards.integrations.areal import ArealReward, reward_fn


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from areal.utils.hf_utils import load_hf_tokenizer

    return load_hf_tokenizer(str(tokenizer_dir(tmp_path_factory.mktemp("areal"))))


class ScriptedEngine:
    """An `InferenceEngine` whose `agenerate` returns the next scripted completion (+ eos)."""

    def __init__(self, tokenizer: Any, completions: list[str]) -> None:
        self.tokenizer = tokenizer
        self.completions = list(completions)
        self.calls = 0

    async def agenerate(self, req: Any) -> Any:
        from areal.api import ModelResponse

        text = self.completions[self.calls]
        self.calls += 1
        out = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        out = [*out, self.tokenizer.eos_token_id]
        return ModelResponse(
            input_tokens=list(req.input_ids),
            output_tokens=out,
            output_logprobs=[0.0] * len(out),
            output_versions=[0] * len(out),
            stop_reason="stop",
            tokenizer=self.tokenizer,
        )


def row(case: Case) -> dict[str, Any]:
    return {
        "messages": [{"role": "user", "content": "Which option is right?"}],
        "answer": case.answer,
        "question_type": case.question_type,
    }


class Trainer:
    """Stands in for AReaL's `PPOTrainer`: records what the README recipe hands to `train()`."""

    def train(self, **kwargs: Any) -> None:
        self.kwargs = kwargs


def readme_train_call(tokenizer_path: str) -> dict[str, Any]:
    """The README's AReaL recipe, executed: the `trainer.train(...)` arguments it gives."""
    from types import SimpleNamespace

    from areal.api.cli_args import GenerationHyperparameters

    trainer = Trainer()
    config = SimpleNamespace(
        gconfig=GenerationHyperparameters(max_new_tokens=128), tokenizer_path=tokenizer_path
    )
    namespace = {"trainer": trainer, "config": config}
    exec(compile(readme_block("areal"), "README.md (areal recipe)", "exec"), namespace)
    return trainer.kwargs


def through_the_single_controller(workflow: Any, workflow_kwargs: dict[str, Any]) -> Any:
    """The workflow as AReaL's single controller builds it on a rollout worker: the controller
    resolves the workflow to a path (`RolloutController._resolve_workflow_str`), its RPC client
    serializes the arguments (`serialize_value`) into a JSON body, the worker's RPC server
    deserializes them (`deserialize_value`) and the engine constructs the workflow
    (`RemoteInfEngine._resolve_workflow`)."""
    import json
    from types import SimpleNamespace

    from areal.infra.controller.rollout_controller import RolloutController
    from areal.infra.remote_inf_engine import RemoteInfEngine
    from areal.infra.rpc.serialization import deserialize_value, serialize_value

    path = RolloutController._resolve_workflow_str(None, workflow)  # type: ignore[arg-type]
    body = json.dumps(serialize_value({"workflow": path, "workflow_kwargs": workflow_kwargs}))
    received = deserialize_value(json.loads(body))
    worker = SimpleNamespace(config=SimpleNamespace(agent=None), logger=None)
    return RemoteInfEngine._resolve_workflow(  # type: ignore[arg-type]
        worker, received["workflow"], received["workflow_kwargs"]
    )


def run_episode(workflow: Any, engine: ScriptedEngine, data: dict[str, Any]) -> float:
    result = asyncio.run(workflow.arun_episode(engine, data))
    return float(result["rewards"].item())


def test_the_installed_areal_is_the_tested_version_named_in_the_readme() -> None:
    installed = importlib.metadata.version("areal")
    print(f"areal {installed}")
    assert installed == readme_tested_version("areal") == TESTED_VERSIONS["areal"][1]


def test_the_reward_pickles_with_its_config() -> None:
    vanilla = ArealReward("vanilla")
    again = pickle.loads(pickle.dumps(vanilla))
    assert again.config == vanilla.config
    case = CASES[1]
    assert again("q", case.completion, [], [], **row(case)) == direct(case, "vanilla").total


def test_the_readme_recipe_runs_through_the_single_controller(tokenizer: Any) -> None:
    """AReaL's default mode: the README's train() arguments cross the controller as JSON, the
    worker builds ParavtRLVRWorkflow from the dotted paths, and its rewards equal direct scoring."""
    from paravt.rewards.integrations.areal_workflow import ParavtRLVRWorkflow

    kwargs = readme_train_call(tokenizer.name_or_path)
    assert isinstance(kwargs["workflow"], str)
    assert isinstance(kwargs["workflow_kwargs"]["reward_fn"], str)
    workflow = through_the_single_controller(kwargs["workflow"], kwargs["workflow_kwargs"])
    assert isinstance(workflow, ParavtRLVRWorkflow) and workflow.reward_fn is reward_fn
    for case in CASES:
        engine = ScriptedEngine(tokenizer, [case.completion])
        assert run_episode(workflow, engine, row(case)) == pytest.approx(direct(case).total)


def test_an_object_reward_cannot_cross_the_single_controller(tokenizer: Any) -> None:
    """Why the README gives dotted paths: the object form fails AReaL's JSON transport."""
    from areal.workflow.rlvr import RLVRWorkflow

    kwargs = readme_train_call(tokenizer.name_or_path)
    kwargs["workflow_kwargs"]["reward_fn"] = ArealReward("paragrpo")
    with pytest.raises(TypeError, match="not JSON serializable"):
        through_the_single_controller(RLVRWorkflow, kwargs["workflow_kwargs"])


def test_areal_own_workflow_takes_the_reward_in_process(tokenizer: Any) -> None:
    """SPMD / in-process: AReaL's RLVRWorkflow with the reward as an object or a dotted path."""
    from areal.api.cli_args import GenerationHyperparameters
    from areal.workflow.rlvr import RLVRWorkflow

    gconfig = GenerationHyperparameters(max_new_tokens=128)
    for fn in (ArealReward("paragrpo"), "paravt.rewards.integrations.areal.reward_fn"):
        workflow = RLVRWorkflow(reward_fn=fn, gconfig=gconfig, tokenizer=tokenizer)
        for case in CASES:
            engine = ScriptedEngine(tokenizer, [case.completion])
            assert run_episode(workflow, engine, row(case)) == pytest.approx(direct(case).total)


def test_multi_turn_workflow_retries_only_a_completion_that_earns_nothing(tokenizer: Any) -> None:
    """MultiTurnWorkflow retries while the reward is 0.0: a well-formatted wrong answer earns
    format credit and is final; a broken one is retried, and the retry's reward is discounted."""
    from areal.api.cli_args import GenerationHyperparameters
    from areal.workflow.multi_turn import MultiTurnWorkflow

    right, wrong, broken = CASES[0], CASES[1], CASES[2]
    assert direct(broken).total == 0.0 and direct(wrong).total > 0.0
    workflow = MultiTurnWorkflow(
        reward_fn=ArealReward("paragrpo"),
        gconfig=GenerationHyperparameters(max_new_tokens=128),
        tokenizer=tokenizer,
        max_turns=3,
        turn_discount=0.5,
    )
    engine = ScriptedEngine(tokenizer, [wrong.completion, right.completion])
    assert run_episode(workflow, engine, row(wrong)) == pytest.approx(direct(wrong).total)
    assert engine.calls == 1

    engine = ScriptedEngine(tokenizer, [broken.completion, right.completion])
    reward = run_episode(workflow, engine, row(right))
    assert engine.calls == 2
    assert reward == pytest.approx(0.5 * direct(right).total)


class SlowReward(ArealReward):
    """A reward that takes longer than AReaL's reward timeout."""

    def breakdown(self, *args: Any, **kwargs: Any) -> Any:
        import time

        time.sleep(2.0)
        return super().breakdown(*args, **kwargs)


@pytest.fixture
def silent_judge() -> Any:
    """An endpoint that accepts connections and never answers."""
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    yield f"http://127.0.0.1:{server.getsockname()[1]}/v1"
    server.close()


def rollout_stats() -> dict[str, float]:
    from areal.utils import stats_tracker

    # AReaL's scalars come out as "<scope>/<key>/avg" (its mean over the samples)
    out = stats_tracker.get("rollout").export(reset=True)
    return {k.removeprefix("rollout/").removesuffix("/avg"): v for k, v in out.items()}


def test_a_reward_past_the_timeout_rejects_the_sample_and_is_counted(tokenizer: Any) -> None:
    """AReaL's wrapper answers 0 when the reward times out; ParavtRLVRWorkflow rejects the
    sample instead (None: AReaL's rejected trajectory) and counts it."""
    from areal.api.cli_args import GenerationHyperparameters
    from areal.workflow.rlvr import RLVRWorkflow

    from paravt.rewards.integrations.areal_workflow import ParavtRLVRWorkflow

    gconfig = GenerationHyperparameters(max_new_tokens=128)
    case = CASES[0]
    rollout_stats()
    # AReaL's own workflow: the timed-out sample is trained on a reward of 0, silently
    plain = RLVRWorkflow(reward_fn=SlowReward("paragrpo"), gconfig=gconfig, tokenizer=tokenizer)
    plain.async_reward_fn.timeout_seconds = 0.5
    plain.async_reward_fn.max_retries = 0
    assert run_episode(plain, ScriptedEngine(tokenizer, [case.completion]), row(case)) == 0.0

    ours = ParavtRLVRWorkflow(
        reward_fn=SlowReward("paragrpo"), reward_timeout_s=0.5, gconfig=gconfig, tokenizer=tokenizer
    )
    ours.async_reward_fn.max_retries = 0
    rollout_stats()
    result = asyncio.run(ours.arun_episode(ScriptedEngine(tokenizer, [case.completion]), row(case)))
    assert result is None
    assert rollout_stats()["paravt/reward_unavailable"] == 1.0


def test_a_silent_judge_is_graded_by_f1_within_the_budget_and_counted(
    tokenizer: Any, silent_judge: str
) -> None:
    """A judge that never answers: the reward still comes back before AReaL's timeout, graded by
    token F1 and counted as judge_unavailable, never AReaL's 0."""
    import time

    from areal.api.cli_args import GenerationHyperparameters

    from paravt.rewards import RewardConfig, score
    from paravt.rewards.integrations.areal_workflow import ParavtRLVRWorkflow

    config = RewardConfig.model_validate(
        {
            **RewardConfig.paragrpo().model_dump(),
            "default_accuracy": "llm",
            "judge": {
                "base_url": silent_judge,
                "model": "judge",
                "api_key_env": None,
                "timeout_s": 60.0,
                "max_retries": 5,
            },
        }
    )
    workflow = ParavtRLVRWorkflow(
        reward_fn=ArealReward(config),
        reward_timeout_s=4.0,
        gconfig=GenerationHyperparameters(max_new_tokens=128),
        tokenizer=tokenizer,
    )
    assert workflow.reward_fn.config.judge.deadline_s == 2.0
    case = CASES[3]  # open-ended: graded by the judge
    rollout_stats()
    t0 = time.monotonic()
    reward = run_episode(workflow, ScriptedEngine(tokenizer, [case.completion]), row(case))
    assert time.monotonic() - t0 < 4.0
    expected = score(case.completion, case.answer, case.question_type, RewardConfig.paragrpo())
    assert reward == pytest.approx(expected.total) and reward > 0  # token F1, not 0
    stats = rollout_stats()
    assert stats["paravt/judge_unavailable"] == 1.0 and stats["paravt/reward_unavailable"] == 0.0
    assert stats["paravt/accuracy"] == pytest.approx(expected.accuracy)
