"""verl: `compute_score` for `custom_reward_function.path=... name=compute_score`.

verl's reward managers call `compute_score(data_source=..., solution_str=..., ground_truth=...,
extra_info=...)` (newer versions add keywords such as `step` or `tokenizer`, which are accepted and
ignored). Options from `custom_reward_function.reward_kwargs` arrive as keywords: pass
`preset: vanilla` or `config: {...}` there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from paravt.rewards.config import RewardConfig
from paravt.rewards.integrations.common import (
    cached_score,
    completion_text,
    require_sequence_anchoring,
    resolve_config,
    sample_from,
)


def compute_score(
    data_source: Any,
    solution_str: str,
    ground_truth: Any,
    extra_info: Any = None,
    *,
    config: RewardConfig | Mapping[str, Any] | None = None,
    preset: str = "paragrpo",
    **kwargs: Any,
) -> dict[str, float]:
    """Score one decoded response. Returns `{"score": total, "acc": ..., "format": ...,
    "base_format", "anchor", "tool", "penalty", "degenerate", "judge_unavailable"}` (all floats, so
    verl can log every key). The question type and options are read from `extra_info` (a dict or
    a JSON string) or from a dict ground truth."""
    cfg = resolve_config(config if config is not None else preset)
    require_sequence_anchoring(cfg, "verl")
    sample = sample_from(ground_truth, extra_info=extra_info)
    r = cached_score(cfg, completion_text(solution_str), sample)
    return {
        "score": r.total,
        "acc": r.accuracy,
        "format": r.format,
        "base_format": r.base_format,
        "anchor": r.anchor,
        "tool": r.tool,
        "penalty": r.penalty,
        "degenerate": float(r.degenerate is not None),
        "judge_unavailable": float(r.judge == "unavailable"),
    }
