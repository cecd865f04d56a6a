"""AReaL: `ParavtRLVRWorkflow`, AReaL's `RLVRWorkflow` with a reward time budget and its metrics.

Imported only inside AReaL (it imports areal at the top). What it changes, and why
(AReaL 1.0.4, areal/workflow/rlvr.py and areal/api/reward_api.py):

- `RLVRWorkflow` wraps the reward in `AsyncRewardWrapper(reward_fn)`, whose timeout is fixed at
  15 s; a reward past it is retried and then answered with 0, which trains the sample on a made-up
  0 and shows nowhere in the metrics. Here the timeout is `reward_timeout_s`, and a reward that
  never came back *rejects* the sample (`arun_episode` returns None, which AReaL counts as
  rejected) and is counted as `paravt/reward_unavailable` in AReaL's stats.
- The `ArealReward`'s judge budget (`budget_s`) is set 3 s (at most half) under
  `reward_timeout_s`, so a slow
  LLM judge gives an "unavailable" verdict (graded by token F1) before AReaL's timeout; such
  samples are counted as `paravt/judge_unavailable`.
- Every reward component is logged beside AReaL's `reward` (`paravt/accuracy`, `paravt/format`,
  `paravt/tool`, `paravt/penalty`, ...).

The reward is given as a dotted path (AReaL's single-controller mode sends workflow arguments as
JSON, where an object cannot travel) or as an `ArealReward`.
"""

from __future__ import annotations

import logging
from typing import Any

from areal import workflow_context
from areal.api import AsyncRewardWrapper
from areal.utils import stats_tracker
from areal.utils.dynamic_import import import_from_string
from areal.workflow.rlvr import RLVRWorkflow

from paravt.rewards.integrations.areal import (
    AREAL_REWARD_TIMEOUT_S,
    ArealReward,
    ArealRewardMetrics,
)

log = logging.getLogger("paravt.rewards.areal")
DEFAULT_REWARD = "paravt.rewards.integrations.areal.reward_fn"


class RewardUnavailable(RuntimeError):
    """The reward did not come back within `reward_timeout_s` (after AReaL's retries)."""


class ParavtRLVRWorkflow(RLVRWorkflow):
    """`RLVRWorkflow` scoring with a ParaVT `ArealReward` under a stated time budget."""

    def __init__(
        self,
        *args: Any,
        reward_fn: ArealReward | str = DEFAULT_REWARD,
        reward_timeout_s: float = AREAL_REWARD_TIMEOUT_S,
        **kwargs: Any,
    ) -> None:
        if not reward_timeout_s > 0:
            raise ValueError(f"reward_timeout_s must be positive, got {reward_timeout_s}")
        reward = import_from_string(reward_fn) if isinstance(reward_fn, str) else reward_fn
        if not isinstance(reward, ArealReward):
            raise TypeError(
                f"ParavtRLVRWorkflow reward_fn={reward_fn!r} is a {type(reward).__name__}, not a "
                f"paravt ArealReward; use {DEFAULT_REWARD!r} or ArealReward(config)"
            )
        budget = reward_timeout_s - min(3.0, reward_timeout_s / 2)  # room to score after the judge
        if reward.budget_s > budget:
            reward = ArealReward(reward.config, budget_s=budget)
        super().__init__(reward, *args, **kwargs)
        self.reward_timeout_s = reward_timeout_s
        # a dict answer tells a scored sample from the wrapper's bare 0 on a timeout
        self.async_reward_fn = AsyncRewardWrapper(
            ArealRewardMetrics(reward), timeout_seconds=reward_timeout_s
        )

    async def _compute_rewards(
        self, resp: Any, prompt_str: str, task_data: dict[str, Any]
    ) -> float:
        completion = self.tokenizer.decode(resp.output_tokens)
        out = await self.async_reward_fn(
            prompt_str, completion, resp.input_tokens, resp.output_tokens, **task_data
        )
        scope = stats_tracker.get(workflow_context.stat_scope())
        if not isinstance(out, dict):
            scope.scalar(**{"paravt/reward_unavailable": 1.0})
            raise RewardUnavailable(
                f"no ParaVT reward within reward_timeout_s={self.reward_timeout_s:g} s (AReaL "
                "answered 0); the sample is rejected, not trained on 0"
            )
        scope.scalar(
            **{"paravt/reward_unavailable": 0.0},
            **{
                f"paravt/{k.split('/', 1)[-1]}": float(v)
                for k, v in out.items()
                if k not in ("total", "reward/total")
            },
        )
        return float(out["total"])

    async def arun_episode(self, engine: Any, data: dict[str, Any]) -> Any:
        try:
            return await super().arun_episode(engine, data)
        except RewardUnavailable as exc:  # counted in _compute_rewards
            log.warning("%s", exc)
            return None  # AReaL: a rejected trajectory
