"""OpenRLHF (tested: 0.11.2): a reward file for `--reward.remote_url`, or an agent executor for
`--train.agent_func_path`.

- `reward_func(queries, prompts, labels)`: what `SingleTurnAgentExecutor` loads from
  `--reward.remote_url reward.py`. It gets `query` = the decoded prompt tokens + response tokens
  and the original `prompt`; when OpenRLHF truncated a long prompt (it keeps the prompt's last
  tokens) the query starts with only a tail of the prompt, which is cut off as well.
- `make_openrlhf_agent_executor(config)`: an `AgentExecutor` class for `--train.agent_func_path`.
  It runs OpenRLHF's own single-turn executor and scores exactly the generated tokens (the
  executor's `action_ranges`), so no text matching is involved at all. The exact route.

`labels` come from `--data.label_key` (an answer string, or a dict / JSON object with `answer`,
`question_type`, `options`). Both return the total as the reward, the accuracy as `scores` (in
[0, 1], read by dynamic filtering) and every component as `extra_logs`. torch and openrlhf are
imported only when these run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from paravt.rewards.config import RewardConfig
from paravt.rewards.integrations.common import (
    cached_score,
    check_framework_version,
    require_sequence_anchoring,
    resolve_config,
    sample_from,
)

OpenRLHFRewardFunc = Callable[..., dict[str, Any]]
LOGGED = ("accuracy", "format", "tool", "penalty")


def response_of(query: str, prompt: str) -> str:
    """The response part of an OpenRLHF `query` (decoded prompt + response tokens).

    The query starts with the prompt, or, when OpenRLHF truncated a long prompt to its last
    tokens, with a tail of it: the longest tail of `prompt` that begins `query` is removed. A
    query that begins with no tail of the prompt is returned whole.
    """
    if not isinstance(prompt, str) or not prompt:
        return query
    if query.startswith(prompt):
        return query[len(prompt) :]
    # a cut through a multi-byte character decodes to U+FFFD at the start of the query
    body = query.lstrip("\ufffd")
    first = body[:1]
    start = prompt.find(first, 1) if first else -1
    while start != -1:  # the earliest start is the longest tail
        if body.startswith(prompt[start:]):
            return body[len(prompt) - start :]
        start = prompt.find(first, start + 1)
    return query


def _logs(results: Sequence[Any]) -> dict[str, Any]:
    import torch  # OpenRLHF always has torch; paravt.rewards itself never imports it

    return {
        name: torch.tensor([float(getattr(r, name)) for r in results], dtype=torch.float32)
        for name in LOGGED
    }


def make_openrlhf_reward_func(
    config: RewardConfig | Mapping[str, Any] | str | None = None,
) -> OpenRLHFRewardFunc:
    """An OpenRLHF `reward_func(queries, prompts, labels)` for `config` (default: PARA-GRPO).

    Returns `{"rewards": totals, "scores": accuracies, "extra_logs": {component: values}}`, each a
    float32 tensor with one entry per query.
    """
    cfg = resolve_config(config)
    require_sequence_anchoring(cfg, "OpenRLHF")

    def reward_func(
        queries: Sequence[str], prompts: Sequence[str], labels: Sequence[Any], **kwargs: Any
    ) -> dict[str, Any]:
        """ParaVT rewards of OpenRLHF queries (prompt + response text) against their labels."""
        import torch

        check_framework_version("openrlhf")
        if len(prompts) != len(queries) or len(labels) != len(queries):
            raise ValueError(
                f"reward_func: {len(queries)} queries, {len(prompts)} prompts and {len(labels)} "
                "labels; pass one prompt and one label per query"
            )
        results = [
            cached_score(cfg, response_of(q, p), sample_from(label))
            for q, p, label in zip(queries, prompts, labels)
        ]
        logs = _logs(results)
        return {
            "rewards": torch.tensor([r.total for r in results], dtype=torch.float32),
            "scores": logs["accuracy"].clone(),
            "extra_logs": logs,
        }

    return reward_func


reward_func = make_openrlhf_reward_func()


def make_openrlhf_agent_executor(
    config: RewardConfig | Mapping[str, Any] | str | None = None,
) -> type:
    """An OpenRLHF `AgentExecutor` class (for `--train.agent_func_path`) scoring with `config`.

    It subclasses OpenRLHF's `SingleTurnAgentExecutor`: OpenRLHF tokenizes, truncates and
    generates as usual, then the reward is computed from the generated token ids alone (decoded
    without special tokens), with `reward` = total, `scores` = accuracy and `extra_logs` = the
    components, as floats. Needs openrlhf installed.
    """
    from openrlhf.utils.agent import SingleTurnAgentExecutor

    check_framework_version("openrlhf")
    cfg = resolve_config(config)
    require_sequence_anchoring(cfg, "OpenRLHF")

    class ParaVTAgentExecutor(SingleTurnAgentExecutor):
        """OpenRLHF's single-turn executor with the ParaVT reward of the generated tokens."""

        def __init__(self) -> None:
            super().__init__(remote_rm_url=None)

        async def execute(  # type: ignore[no-untyped-def]
            self, prompt, label, sampling_params, max_length, hf_tokenizer, llm_engine, images=None
        ):
            output = await super().execute(
                prompt, label, sampling_params, max_length, hf_tokenizer, llm_engine, images
            )
            tokens = output["observation_tokens"]
            response_ids = [t for start, end in output["action_ranges"] for t in tokens[start:end]]
            response = hf_tokenizer.decode(response_ids, skip_special_tokens=True)
            r = cached_score(cfg, response, sample_from(label))
            output.update(
                reward=r.total,
                scores=r.accuracy,
                extra_logs={name: float(getattr(r, name)) for name in LOGGED},
            )
            return output

    return ParaVTAgentExecutor
