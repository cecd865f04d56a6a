"""OpenRLHF: `reward_func(queries, prompts, labels, **kwargs)` for `--remote_rm_url reward.py`.

`queries` are prompt + response texts, `prompts` the prompts, `labels` the `--label_key` column
(an answer string, or a dict / JSON object with `answer`, `question_type`, `options`). Returns
`{"rewards": tensor, "scores": tensor, "extra_logs": {name: tensor}}`; torch is imported here
only, when the function runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from paravt.rewards.config import RewardConfig
from paravt.rewards.integrations.common import (
    cached_score,
    require_sequence_anchoring,
    resolve_config,
    sample_from,
)

OpenRLHFRewardFunc = Callable[..., dict[str, Any]]


def _response(query: str, prompt: str) -> str:
    if isinstance(prompt, str) and query.startswith(prompt):
        return query[len(prompt) :]
    return query


def make_openrlhf_reward_func(
    config: RewardConfig | Mapping[str, Any] | str | None = None,
) -> OpenRLHFRewardFunc:
    """An OpenRLHF reward function for `config` (default: PARA-GRPO).

    `rewards` are the totals, `scores` (used by dynamic filtering, in [0, 1]) the accuracies,
    `extra_logs` every component per sample.
    """
    cfg = resolve_config(config)
    require_sequence_anchoring(cfg, "OpenRLHF")

    def reward_func(
        queries: Sequence[str], prompts: Sequence[str], labels: Sequence[Any], **kwargs: Any
    ) -> dict[str, Any]:
        import torch  # OpenRLHF always has torch; paravt.rewards itself never imports it

        if len(prompts) != len(queries) or len(labels) != len(queries):
            raise ValueError(
                f"reward_func: {len(queries)} queries, {len(prompts)} prompts and {len(labels)} "
                "labels; pass one prompt and one label per query"
            )
        results = [
            cached_score(cfg, _response(q, p), sample_from(label))
            for q, p, label in zip(queries, prompts, labels)
        ]
        logs = {
            name: torch.tensor([float(getattr(r, name)) for r in results], dtype=torch.float32)
            for name in ("accuracy", "format", "tool", "penalty")
        }
        return {
            "rewards": torch.tensor([r.total for r in results], dtype=torch.float32),
            "scores": logs["accuracy"].clone(),
            "extra_logs": logs,
        }

    return reward_func


reward_func = make_openrlhf_reward_func()
