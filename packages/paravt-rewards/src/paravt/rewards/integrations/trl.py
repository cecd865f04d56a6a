"""TRL: reward callables for `GRPOTrainer(reward_funcs=...)`.

TRL calls `fn(prompts=..., completions=..., completion_ids=..., **columns)` where every extra
dataset column arrives as a list (one entry per completion), plus `trainer_state`, `log_extra`
and `log_metric`. Completions are strings or chat messages; from messages only the assistant turns
are scored, and `tool`-role messages (the environment's answers in TRL's tool-calling loop) count
as tool responses, never as answer text (`common.split_completion`).

Tool mode (`GRPOTrainer(tools=...)` or `environment_factory=...`): TRL parses every generation
with the tokenizer's response template (`trl.chat_template_utils.parse_response`), so an assistant
message carries `reasoning_content` (the `<think>` body), `content` (the rest) and `tool_calls`
(`[{"type": "function", "function": {"name", "arguments"}}]`). `split_completion` writes them back
as the model's text (`<think>...</think>`, content, `<tool_call>{"name", "arguments"}</tool_call>`
per call), which scores as the raw completion does. The parser drops whether a `<think>` was
closed: with `eos_token_ids` the adapter reads truncation off `completion_ids` (last id not an
end-of-turn id) and leaves a cut-off last `<think>` open, as it was.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

from paravt.rewards.config import RewardConfig
from paravt.rewards.integrations.common import (
    check_framework_version,
    require_sequence_anchoring,
    resolve_config,
    score_row,
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


def _truncated(completion_ids: Any, i: int, eos: Collection[int] | None) -> bool:
    """Whether completion `i` ended at the length limit (its last id is not an end-of-turn id)."""
    if eos is None or not isinstance(completion_ids, (list, tuple)) or i >= len(completion_ids):
        return False
    ids = completion_ids[i]
    if hasattr(ids, "tolist"):
        ids = ids.tolist()
    return bool(len(ids)) and int(ids[-1]) not in eos


def _score_batch(
    config: RewardConfig,
    completions: list[Any],
    kwargs: Mapping[str, Any],
    completion_ids: Any = None,
    eos: Collection[int] | None = None,
) -> list[RewardBreakdown]:
    return [
        score_row(config, c, _row(kwargs, i), truncated=_truncated(completion_ids, i, eos))
        for i, c in enumerate(completions)
    ]


def trl_reward_funcs(
    config: RewardConfig | Mapping[str, Any] | str | None = None,
    *,
    components: bool = False,
    eos_token_ids: Collection[int] | None = None,
) -> list[RewardFunc]:
    """TRL reward functions for `config` (default: PARA-GRPO).

    `components=False`: one function `paravt_reward` returning the total.
    `components=True`: `paravt_accuracy`, `paravt_format`, `paravt_tool`, `paravt_penalty`, each
    logged by TRL under its own name; pass `reward_weights=trl_reward_weights(config)` to
    `GRPOConfig` so their weighted sum is the total. Each completion is scored once either way.
    The answer comes from the `answer` column (or ground_truth / solution / extra_info), the
    question type from `question_type` (or extra_info). When TRL passes `log_metric`, the total
    function also logs the mean of every component and the count of judge outages.
    `eos_token_ids` (the tokenizer's end-of-turn ids, e.g. `[tokenizer.eos_token_id]`): in tool
    mode, a completion whose `completion_ids` do not end with one of them was cut off, and a last
    turn of reasoning only is scored with its `<think>` open (see the module docstring).
    """
    check_framework_version("trl")
    eos = frozenset(int(t) for t in eos_token_ids) if eos_token_ids is not None else None
    cfg = resolve_config(config)
    require_sequence_anchoring(cfg, "TRL")

    def paravt_reward(
        prompts: list[Any], completions: list[Any], completion_ids: Any = None, **kwargs: Any
    ) -> list[float | None]:
        results = _score_batch(cfg, completions, kwargs, completion_ids, eos)
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
            results = _score_batch(cfg, completions, kwargs, completion_ids, eos)
            return [float(getattr(r, name)) for r in results]

        fn.__name__ = fn.__qualname__ = f"paravt_{name}"
        fn.__doc__ = f"The {name} component of the ParaVT reward (TRL reward function)."
        return fn

    return [make(name) for name in COMPONENTS]


def trl_reward_weights(config: RewardConfig | Mapping[str, Any] | str | None = None) -> list[float]:
    """`GRPOConfig.reward_weights` matching `trl_reward_funcs(config, components=True)`."""
    cfg = resolve_config(config)
    tool_w = cfg.tool_weight if cfg.tool_reward else 0.0
    return [cfg.accuracy_weight, cfg.format_weight, tool_w, -cfg.gamma]
