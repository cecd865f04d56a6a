"""OpenRLHF's own rollout code calls our reward: both README routes, truncated prompts included.

The README's flags are parsed by `train_ppo_ray`'s own argument parser (its `__main__` block, run
up to `parse_args`); the files they name are the README's code blocks; OpenRLHF loads them itself
(`_load_agent_executor` for `--train.agent_func_path`, `SingleTurnAgentExecutor` for
`--reward.remote_url`), tokenizes, truncates and stitches; `SamplesGenerator` turns the output
into an `Experience`. The only stand-ins: a scripted generation engine and a `vllm` import stub
(vLLM has no CPU build that installs here). Rewards, scores and extra logs must equal
`paravt.rewards.score` on the generated completions.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import shlex
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from shared import (
    CASES,
    Case,
    direct,
    openrlhf_parser,
    readme_block,
    readme_tested_version,
    tokenizer_dir,
)

from paravt.core.prompts import system_prompt
from paravt.rewards.integrations import TESTED_VERSIONS

KEPT = 120  # prompt tokens OpenRLHF keeps: max_length - max_tokens


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tokenizer_dir(tmp_path_factory.mktemp("openrlhf")))


def readme_commands() -> list[list[str]]:
    """The README's OpenRLHF command lines, as argument lists after the module name."""
    commands = []
    for line in readme_block("openrlhf").splitlines():
        words = shlex.split(line, comments=True)
        if words:
            assert words[:3] == ["python", "-m", "openrlhf.cli.train_ppo_ray"], words
            commands.append([w for w in words[3:] if w != "..."])
    return commands


def parsed_args(argv: list[str], workdir: Path) -> Any:
    """The README flags through OpenRLHF's parser and `hierarchize`, with the files they name
    written from the README's blocks into `workdir`."""
    from openrlhf.utils.config import hierarchize

    for name in ("agent.py", "reward.py"):
        (workdir / name).write_text(readme_block(f"openrlhf {name}"), encoding="utf-8")
    argv = [str(workdir / w) if w in ("agent.py", "reward.py") else w for w in argv]
    return hierarchize(openrlhf_parser().parse_args(argv))


class ScriptedEngine:
    """`llm_engine.generate(token_ids, params, multi_modal_data=None)` returning the scripted
    completion's tokens (+ eos), as vLLM's RequestOutput does."""

    def __init__(self, tokenizer: Any, completion: str) -> None:
        self.ids = [
            *tokenizer(completion, add_special_tokens=False)["input_ids"],
            tokenizer.eos_token_id,
        ]
        self.text = completion
        self.prompt_ids: list[int] = []

    async def generate(
        self, token_ids: list[int], params: Any, multi_modal_data: Any = None
    ) -> Any:
        self.prompt_ids = list(token_ids)
        assert len(self.ids) <= params.max_tokens
        output = SimpleNamespace(
            token_ids=self.ids, text=self.text, finish_reason="stop", logprobs=None
        )
        return SimpleNamespace(outputs=[output])


def prompt_of(tokenizer: Any, long: bool) -> str:
    messages = [{"role": "user", "content": "Which option is right?"}]
    if long:  # ParaVT's agentic system prompt, full of protocol tags, is longer than KEPT tokens
        messages.insert(0, {"role": "system", "content": system_prompt("agentic_general")})
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def label_of(case: Case) -> str:
    return json.dumps({"answer": case.answer, "question_type": case.question_type})


def rollout(
    executor: Any, tokenizer: Any, case: Case, long_prompt: bool
) -> tuple[Any, ScriptedEngine]:
    """One executor run and the Experience OpenRLHF builds from it."""
    from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator
    from vllm import SamplingParams

    engine = ScriptedEngine(tokenizer, case.completion)
    max_tokens = 128
    max_length = max_tokens + KEPT  # a longer prompt is truncated to its last KEPT tokens
    output = asyncio.run(
        executor.execute(
            prompt_of(tokenizer, long_prompt),
            label_of(case),
            SamplingParams(max_tokens=max_tokens),
            max_length,
            tokenizer,
            engine,
        )
    )
    generator = SamplesGenerator.__new__(SamplesGenerator)
    experience = generator._process_response_into_experience(output, max_len=max_length)
    return experience, engine


def assert_experience_matches(experience: Any, case: Case) -> None:
    r = direct(case)
    assert experience.rewards.flatten().tolist() == pytest.approx([r.total])
    assert experience.scores.flatten().tolist() == pytest.approx([r.accuracy])
    for name in ("accuracy", "format", "tool", "penalty"):
        assert experience.info[name].flatten().tolist() == pytest.approx([getattr(r, name)]), name


def test_the_installed_openrlhf_is_the_tested_version_named_in_the_readme() -> None:
    installed = importlib.metadata.version("openrlhf")
    print(f"openrlhf {installed}")
    assert installed == readme_tested_version("openrlhf") == TESTED_VERSIONS["openrlhf"][1]


def test_the_readme_flags_are_openrlhfs_current_flags(tmp_path: Path) -> None:
    agent_cmd, reward_cmd = readme_commands()
    agent_args = parsed_args(agent_cmd, tmp_path)
    assert agent_args.data.label_key == "answer"
    assert agent_args.train.agent_func_path.endswith("agent.py")
    reward_args = parsed_args(reward_cmd, tmp_path)
    assert reward_args.reward.remote_url.endswith("reward.py")
    with pytest.raises(SystemExit):  # the flags of older OpenRLHF versions are gone
        openrlhf_parser().parse_args(["--remote_rm_url", "reward.py", "--label_key", "answer"])


@pytest.mark.parametrize("long_prompt", [False, True], ids=["prompt", "truncated-prompt"])
def test_the_agent_executor_route_scores_the_generated_tokens(
    tokenizer: Any, tmp_path: Path, long_prompt: bool
) -> None:
    from openrlhf.trainer.ray.vllm_engine import _load_agent_executor

    args = parsed_args(readme_commands()[0], tmp_path)
    executor = _load_agent_executor(args.train.agent_func_path)
    for case in CASES:
        experience, engine = rollout(executor, tokenizer, case, long_prompt)
        assert (len(engine.prompt_ids) == KEPT) is long_prompt  # OpenRLHF truncated the prompt
        assert_experience_matches(experience, case)


@pytest.mark.parametrize("long_prompt", [False, True], ids=["prompt", "truncated-prompt"])
def test_the_reward_file_route_scores_only_the_completion(
    tokenizer: Any, tmp_path: Path, long_prompt: bool
) -> None:
    from openrlhf.utils.agent import SingleTurnAgentExecutor

    args = parsed_args(readme_commands()[1], tmp_path)
    executor = SingleTurnAgentExecutor(args.reward.remote_url.split(","))  # as train_ppo_ray does
    assert executor.reward_func is not None
    for case in CASES:
        experience, engine = rollout(executor, tokenizer, case, long_prompt)
        assert (len(engine.prompt_ids) == KEPT) is long_prompt
        assert_experience_matches(experience, case)
