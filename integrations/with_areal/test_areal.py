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


def readme_workflow(tokenizer: Any, **replace: str) -> Any:
    """The README's AReaL recipe, executed; `replace` swaps text in it (e.g. the dotted path)."""
    from areal.api.cli_args import GenerationHyperparameters

    code = readme_block("areal")
    for old, new in replace.items():
        assert old in code, old
        code = code.replace(old, new)
    namespace = {"gconfig": GenerationHyperparameters(max_new_tokens=128), "tokenizer": tokenizer}
    exec(compile(code, "README.md (areal recipe)", "exec"), namespace)
    return namespace["workflow"]


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


@pytest.mark.parametrize("as_path", [False, True], ids=["object", "dotted-path"])
def test_rlvr_workflow_rewards_equal_direct_scoring(tokenizer: Any, as_path: bool) -> None:
    replace = (
        {'ArealReward("paragrpo")': '"paravt.rewards.integrations.areal.reward_fn"'}
        if as_path
        else {}
    )
    workflow = readme_workflow(tokenizer, **replace)
    assert isinstance(workflow.reward_fn, str) is as_path
    for case in CASES:
        engine = ScriptedEngine(tokenizer, [case.completion])
        assert run_episode(workflow, engine, row(case)) == pytest.approx(direct(case).total)
    assert workflow.reward_fn is reward_fn or not as_path  # AReaL imported our instance


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
