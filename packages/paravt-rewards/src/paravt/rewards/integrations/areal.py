"""AReaL: a picklable `reward_fn(prompt, completions, prompt_ids, completion_ids, **data) -> float`
(tested: AReaL 1.0.4).

AReaL's `RLVRWorkflow` and `MultiTurnWorkflow` call the reward function through
`AsyncRewardWrapper`, which runs it in a `ProcessPoolExecutor`: the function and its arguments are
pickled. `ArealReward` is a small module-level class carrying its `RewardConfig`, so an instance
pickles; `reward_fn` (PARA-GRPO) and `vanilla_reward_fn` are ready-made instances that also work
as dotted paths (`reward_fn="paravt.rewards.integrations.areal.reward_fn"`).

The workflow passes the decoded prompt, the decoded completion, both token id lists, and the
dataset row as keywords (`answer`, `question_type`, `options`, or the reference's `extra_info`).
"""

from __future__ import annotations

from collections.abc import Mapping
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


class ArealReward:
    """The total ParaVT reward of one completion, as an AReaL reward function.

    Picklable (it holds only its `RewardConfig`), so AReaL's process pool can run it. AReaL's
    `MultiTurnWorkflow` retries while the reward is exactly 0.0: with the graded ParaVT reward a
    well-formatted wrong answer already earns format credit (> 0) and is not retried; only a
    completion that earns nothing in any term is.
    """

    def __init__(self, config: RewardConfig | Mapping[str, Any] | str | None = None) -> None:
        self.config = resolve_config(config)
        require_sequence_anchoring(self.config, "AReaL")

    def __call__(
        self, prompt: str, completions: Any, prompt_ids: Any, completion_ids: Any, **data: Any
    ) -> float:
        """The total reward of `completions` (the decoded completion); the row's fields in `data`."""
        check_framework_version("areal")
        return cached_score(self.config, split_completion(completions), sample_from(**data)).total

    def __repr__(self) -> str:
        return f"ArealReward({self.config!r})"


def make_areal_reward_fn(
    config: RewardConfig | Mapping[str, Any] | str | None = None,
) -> ArealReward:
    """An AReaL reward function for `config` (default: PARA-GRPO); picklable."""
    check_framework_version("areal")
    return ArealReward(config)


reward_fn = ArealReward("paragrpo")
vanilla_reward_fn = ArealReward("vanilla")
