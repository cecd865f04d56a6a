"""TRL: reward callables for `GRPOTrainer(reward_funcs=...)`.

TRL calls `fn(prompts=..., completions=..., completion_ids=..., **columns)` where every extra
dataset column arrives as a list (one entry per completion), plus `trainer_state`, `log_extra`
and `log_metric`. Completions are strings or chat messages; from messages only the assistant turns
are scored, and `tool`-role messages (the environment's answers in TRL's tool-calling loop) count
as tool responses, never as answer text (`common.split_completion`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from paravt.rewards.config import RewardConfig
from paravt.rewards.integrations.common import (
    cached_score,
    check_framework_version,
    require_sequence_anchoring,
    resolve_config,
    sample_from,
    split_completion,
)
from paravt.rewards.score import RewardBreakdown

RewardFunc = Callable[..., list[float | None]]
_FRAMEWORK_KWARGS = ("trainer_state", "log_extra", "log_metric", "environments")
COMPONENTS = ("accuracy", "format", "tool", "penalty")


def _row(kwargs: Mapping[str, Any], i: int) -> dict[str, Any]:
    row = {}
    for key, column in kwargs.items():
        if key in _FRAMEWORK_KWARGS:
            continue
        if isinstance(column, (list, tuple)) and i < len(column):
            row[key] = column[i]
    return row


def _score_batch(
    config: RewardConfig, completions: list[Any], kwargs: Mapping[str, Any]
) -> list[RewardBreakdown]:
    return [
        cached_score(config, split_completion(c), sample_from(**_row(kwargs, i)))
        for i, c in enumerate(completions)
    ]


def trl_reward_funcs(
    config: RewardConfig | Mapping[str, Any] | str | None = None, *, components: bool = False
) -> list[RewardFunc]:
    """TRL reward functions for `config` (default: PARA-GRPO).

    `components=False`: one function `paravt_reward` returning the total.
    `components=True`: `paravt_accuracy`, `paravt_format`, `paravt_tool`, `paravt_penalty`, each
    logged by TRL under its own name; pass `reward_weights=trl_reward_weights(config)` to
    `GRPOConfig` so their weighted sum is the total. Each completion is scored once either way.
    The answer comes from the `answer` column (or ground_truth / solution / extra_info), the
    question type from `question_type` (or extra_info). When TRL passes `log_metric`, the total
    function also logs the mean of every component and the count of judge outages.
    """
    check_framework_version("trl")
    cfg = resolve_config(config)
    require_sequence_anchoring(cfg, "TRL")

    def paravt_reward(
        prompts: list[Any], completions: list[Any], completion_ids: Any = None, **kwargs: Any
    ) -> list[float | None]:
        results = _score_batch(cfg, completions, kwargs)
        log_metric = kwargs.get("log_metric")
        if callable(log_metric) and results:
            sums: dict[str, float] = {}
            for r in results:
                for k, v in r.components().items():
                    sums[k] = sums.get(k, 0.0) + v
            for k, v in sums.items():
                log_metric(f"paravt/{k}", v / len(results))
        return [r.total for r in results]

    if not components:
        return [paravt_reward]

    def make(name: str) -> RewardFunc:
        def fn(
            prompts: list[Any], completions: list[Any], completion_ids: Any = None, **kwargs: Any
        ) -> list[float | None]:
            return [float(getattr(r, name)) for r in _score_batch(cfg, completions, kwargs)]

        fn.__name__ = fn.__qualname__ = f"paravt_{name}"
        fn.__doc__ = f"The {name} component of the ParaVT reward (TRL reward function)."
        return fn

    return [make(name) for name in COMPONENTS]


def trl_reward_weights(config: RewardConfig | Mapping[str, Any] | str | None = None) -> list[float]:
    """`GRPOConfig.reward_weights` matching `trl_reward_funcs(config, components=True)`."""
    cfg = resolve_config(config)
    tool_w = cfg.tool_weight if cfg.tool_reward else 0.0
    return [cfg.accuracy_weight, cfg.format_weight, tool_w, -cfg.gamma]
