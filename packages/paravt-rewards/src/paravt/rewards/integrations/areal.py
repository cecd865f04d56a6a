"""AReaL: `reward_fn(prompt, completions, prompt_ids, completion_ids, **data) -> float`.

AReaL's RLVR workflow calls the reward function positionally with the decoded prompt, the decoded
completion, both token id lists, and the dataset row as keywords (`answer`, `question_type`, ...).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from paravt.rewards.config import RewardConfig
from paravt.rewards.integrations.common import (
    cached_score,
    completion_text,
    require_sequence_anchoring,
    resolve_config,
    sample_from,
)

ArealRewardFn = Callable[..., float]


def make_areal_reward_fn(
    config: RewardConfig | Mapping[str, Any] | str | None = None,
) -> ArealRewardFn:
    """An AReaL reward function for `config` (default: PARA-GRPO)."""
    cfg = resolve_config(config)
    require_sequence_anchoring(cfg, "AReaL")

    def reward_fn(
        prompt: str, completions: Any, prompt_ids: Any, completion_ids: Any, **data: Any
    ) -> float:
        """The total ParaVT reward of one completion; the row's fields come in `data`."""
        return cached_score(cfg, completion_text(completions), sample_from(**data)).total

    return reward_fn


reward_fn = make_areal_reward_fn()
