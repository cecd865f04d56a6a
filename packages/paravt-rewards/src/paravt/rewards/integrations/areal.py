"""AReaL: a picklable `reward_fn(prompt, completions, prompt_ids, completion_ids, **data) -> float`
(tested: AReaL 1.0.4).

AReaL's `RLVRWorkflow` and `MultiTurnWorkflow` call the reward function through
`AsyncRewardWrapper`, which runs it in a `ProcessPoolExecutor`: the function and its arguments are
pickled. `ArealReward` is a small module-level class carrying its `RewardConfig`, so an instance
pickles; `reward_fn` (PARA-GRPO) and `vanilla_reward_fn` are ready-made instances that also work
as dotted paths (`reward_fn="paravt.rewards.integrations.areal.reward_fn"`).

In AReaL's default single-controller mode the workflow arguments travel as JSON: give the reward
as a dotted path, and prefer `areal_workflow.ParavtRLVRWorkflow` (a stated reward timeout, the
components and outages in AReaL's stats). `budget_s` keeps an LLM judge inside AReaL's timeout.

The workflow passes the decoded prompt, the decoded completion, both token id lists, and the
dataset row as keywords (`answer`, `question_type`, `options`, or the reference's `extra_info`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from paravt.rewards.config import RewardConfig
from paravt.rewards.integrations.common import (
    check_framework_version,
    require_sequence_anchoring,
    resolve_config,
    score_row,
)
from paravt.rewards.score import RewardBreakdown

# AReaL 1.0.4's `AsyncRewardWrapper(reward_fn, timeout_seconds=15)` (areal/api/reward_api.py): past
# it the reward is retried, and after the last attempt it is 0 (a warning in the log, nothing in the
# metrics). `RLVRWorkflow` and `MultiTurnWorkflow` build the wrapper with that default.
AREAL_REWARD_TIMEOUT_S = 15.0


class ArealReward:
    """The total ParaVT reward of one completion, as an AReaL reward function.

    Picklable (it holds only its `RewardConfig`), so AReaL's process pool can run it. AReaL's
    `MultiTurnWorkflow` retries while the reward is exactly 0.0: with the graded ParaVT reward a
    well-formatted wrong answer already earns format credit (> 0) and is not retried; only a
    completion that earns nothing in any term is.

    `budget_s` bounds an LLM judge (all attempts and back-offs of one verdict, `deadline_s`) so
    the reward comes back before AReaL's own timeout: a judge past it is "unavailable" (the answer
    graded by token F1 and flagged), never AReaL's silent 0. Default: 3 s under AReaL's 15 s.
    """

    def __init__(
        self,
        config: RewardConfig | Mapping[str, Any] | str | None = None,
        *,
        budget_s: float = AREAL_REWARD_TIMEOUT_S - 3.0,
    ) -> None:
        if not budget_s > 0:
            raise ValueError(f"ArealReward budget_s must be positive, got {budget_s}")
        cfg = resolve_config(config)
        require_sequence_anchoring(cfg, "AReaL")
        judge = cfg.judge
        if judge is not None and (judge.deadline_s is None or judge.deadline_s > budget_s):
            cfg = cfg.model_copy(
                update={"judge": judge.model_copy(update={"deadline_s": budget_s})}
            )
        self.config = cfg
        self.budget_s = budget_s

    def breakdown(
        self, prompt: str, completions: Any, prompt_ids: Any, completion_ids: Any, **data: Any
    ) -> RewardBreakdown:
        """The whole `RewardBreakdown` of the completion (what `__call__` sums)."""
        check_framework_version("areal")
        return score_row(self.config, completions, data)

    def __call__(
        self, prompt: str, completions: Any, prompt_ids: Any, completion_ids: Any, **data: Any
    ) -> float:
        """The total reward of `completions` (the decoded completion); the row's fields in `data`."""
        return self.breakdown(prompt, completions, prompt_ids, completion_ids, **data).total

    def __repr__(self) -> str:
        return f"ArealReward({self.config!r}, budget_s={self.budget_s})"


class ArealRewardMetrics:
    """`reward` answering a dict: `total` and every component (`RewardBreakdown.components`).

    `ParavtRLVRWorkflow` runs this in AReaL's process pool, so a reward that never came back
    (AReaL's timeout answers a bare 0) is told apart from a scored one. Picklable."""

    def __init__(self, reward: ArealReward) -> None:
        if not isinstance(reward, ArealReward):
            raise TypeError(
                f"ParavtRLVRWorkflow needs a paravt ArealReward (or its dotted path), got "
                f"{type(reward).__name__}; use paravt.rewards.integrations.areal.reward_fn"
            )
        self.reward = reward

    def __call__(
        self, prompt: str, completions: Any, prompt_ids: Any, completion_ids: Any, **data: Any
    ) -> dict[str, float]:
        r = self.reward.breakdown(prompt, completions, prompt_ids, completion_ids, **data)
        return {"total": r.total, **r.components()}


def make_areal_reward_fn(
    config: RewardConfig | Mapping[str, Any] | str | None = None,
) -> ArealReward:
    """An AReaL reward function for `config` (default: PARA-GRPO); picklable."""
    check_framework_version("areal")
    return ArealReward(config)


reward_fn = ArealReward("paragrpo")
vanilla_reward_fn = ArealReward("vanilla")
