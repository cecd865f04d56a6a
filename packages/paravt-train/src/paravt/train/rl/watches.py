"""The run's watches over its step metrics: `NoSignalWatch` (groups without learning signal),
`InvalidCallWatch` (reward earned while invalid calls rise) and `ClipWatch` (rewards flattened by
the reward clip), each warning with numbers."""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from paravt.train.ranks import is_rank0

log = logging.getLogger("paravt.train")


class NoSignalWatch:
    """Counts consecutive steps in which every group's rewards were equal and warns (rank 0) after
    `after` of them, then every `after` steps while it lasts (0: never). Given the steps'
    `accuracy`, the warning says which case it sees: every rollout right all along (a policy that
    has converged on these prompts) or every rollout wrong (an untrained model, a reward that
    cannot vary); otherwise, or without it, both causes are named."""

    def __init__(self, after: int) -> None:
        self.after = after
        self.streak = 0
        self.all_right = self.all_wrong = self.all_mixed = (
            False  # over the streak, as far as the accuracy says
        )

    def observe(self, step: int, zero_groups_frac: float, accuracy: float | None = None) -> None:
        self.streak = self.streak + 1 if zero_groups_frac >= 1.0 - 1e-9 else 0
        right = accuracy is not None and accuracy >= 1.0 - 1e-9
        wrong = accuracy is not None and accuracy <= 1e-9
        first = self.streak == 1
        self.all_right = right and (first or self.all_right)
        self.all_wrong = wrong and (first or self.all_wrong)
        mixed = accuracy is not None and not right and not wrong
        self.all_mixed = mixed and (first or self.all_mixed)
        if self.after and self.streak and self.streak % self.after == 0 and is_rank0():
            log.warning(
                "steps %d-%d: no learning signal: in every group all rollouts got the same "
                "reward (advantage/zero_groups_frac = 1), so every outcome advantage is zero. %s",
                step - self.streak + 1,
                step,
                self._cause(),
            )

    def _cause(self) -> str:
        if self.all_right:
            return (
                "Every rollout answered right (accuracy 1): the policy has converged on these "
                "prompts; harder prompts, a larger group or a higher temperature give it "
                "something to learn again"
            )
        untrained = (
            "an untrained or random model on the rollout server (every answer equally wrong or "
            "malformed: check model.path and the server's --model-path), or a reward that cannot "
            "vary (check reward.* and the data's answers)"
        )
        if self.all_wrong:
            return f"Every rollout was equally wrong (accuracy 0). Likely causes: {untrained}"
        if self.all_mixed:
            return (
                "Some prompts were answered right and others wrong, yet within every group all "
                "rollouts scored alike: a group's rollouts are probably one draw repeated "
                "(rollout.temperature 0, or a rollout server given the same seed for every "
                "request of a group). Other causes: a policy that has converged on these prompts "
                f"(every answer right), or {untrained}"
            )
        return (
            "Likely causes: a policy that has converged on these prompts (every answer right), "
            f"or {untrained}"
        )


class InvalidCallWatch:
    """Warns once per run (rank 0) when the reward is being earned by invalid tool calls.

    The rule, over the last `window` steps (0: never): the steps' first half and last half (the
    middle step left out when `window` is odd) are averaged, and it fires when

    - `reward/total` rose (last half's mean above the first half's), and
    - the invalid share of call attempts, mean `tool/invalid_calls` / mean
      `tool/call_attempts` over a half (0 where the half attempted no call), rose by at least
      `rise` (absolute), with calls attempted in the last half.

    Halves of several steps make one noisy step unable to fire it. The metrics it reads are the
    step's global means (`step_metrics` averages them over ranks), so every rank sees the same
    thing and the watch makes no collective; only rank 0 logs. A step without a finite reward or
    call count is skipped."""

    def __init__(self, window: int = 8, rise: float = 0.1, reward: Any = None) -> None:
        if window == 1:
            raise ValueError("InvalidCallWatch: window must be at least 2 steps (0: never warn)")
        self.window = window
        self.rise = rise
        self.rows: deque[tuple[int, float, float, float, float]] = deque(maxlen=max(window, 2))
        self.fired = False
        self.hint = invalid_call_hint(reward)
        # a reward that pays a call with a tool name (the released one; None: unknown, read as
        # that) is earned by them; under evidence credit they earn nothing and the rise is other
        pays = reward is None or reward.tool_credit == "parseable"
        self.lead = (
            "reward is being earned by invalid calls"
            if pays
            else "invalid calls rise with the reward, which pays them nothing"
        )

    def observe(self, step: int, metrics: Mapping[str, float]) -> bool:
        """Add `step`'s metrics; True when this step fired the warning (at most once a run)."""
        values = [
            float(metrics.get(k, math.nan))
            for k in ("reward/total", "tool/invalid_calls", "tool/call_attempts", "format_ok")
        ]
        if not all(math.isfinite(v) for v in values[:3]):
            return False
        reward, invalid, attempts, format_ok = values
        self.rows.append((step, reward, invalid, attempts, format_ok))
        if not self.window or self.fired or len(self.rows) < self.window:
            return False
        rows = list(self.rows)
        half = self.window // 2
        before, after = _half_means(rows[:half]), _half_means(rows[-half:])
        if not (
            after["attempts"] > 0
            and after["reward"] > before["reward"]
            and after["share"] - before["share"] >= self.rise
        ):
            return False
        self.fired = True
        if is_rank0():
            log.warning(
                "steps %d-%d: %s: reward/total %.3f -> %.3f "
                "while the invalid share of tool calls rose %.2f -> %.2f (invalid calls / "
                "episode %.2f -> %.2f of %.2f -> %.2f attempts), format_ok %.2f -> %.2f (means "
                "of the first and last %d steps). %s (Warned once per run.)",
                rows[0][0],
                rows[-1][0],
                self.lead,
                before["reward"],
                after["reward"],
                before["share"],
                after["share"],
                before["invalid"],
                after["invalid"],
                before["attempts"],
                after["attempts"],
                before["format_ok"],
                after["format_ok"],
                half,
                self.hint,
            )
        return True


def invalid_call_hint(reward: Any) -> str:
    """What to do about rising invalid calls under the run's `RewardConfig` (None: unknown)."""
    if reward is None or reward.tool_credit == "parseable" or reward.gamma == 0:
        return (
            "The reward pays calls that bring no evidence: use RewardConfig(tool_credit="
            "'evidence', gamma>0), the paragrpo preset."
        )
    return (
        f"The reward already charges them (tool_credit='evidence', gamma={reward.gamma:g}, "
        f"penalty_unit='{reward.penalty_unit}'): read the parser's reasons "
        "(`paravt-train episodes RUN_DIR`; a call cut by the turn's token limit is invalid "
        "JSON), then give turns more tokens or charge more (penalty_unit='call', a larger gamma)."
    )


def _half_means(rows: Sequence[tuple[int, float, float, float, float]]) -> dict[str, float]:
    """Means of reward, invalid calls, call attempts and format_ok over `rows`, and the invalid
    share (mean invalid / mean attempts; 0 without attempts)."""
    n = len(rows)
    reward, invalid, attempts = (sum(r[i] for r in rows) / n for i in (1, 2, 3))
    fmt_ok = [r[4] for r in rows if math.isfinite(r[4])]
    return {
        "reward": reward,
        "invalid": invalid,
        "attempts": attempts,
        "share": invalid / attempts if attempts > 0 else 0.0,
        "format_ok": sum(fmt_ok) / len(fmt_ok) if fmt_ok else math.nan,
    }


class ClipWatch:
    """Warns once per run (rank 0) the first step at least `share` of whose episodes had their
    shaped reward at `advantage.reward_clip` (metric `advantage/at_clip_frac`): every reward above
    `clip / scaling - bias` reads the same, so what those episodes earned above it (R_tool, the
    anchor parts) moved no advantage, and where a group is squeezed against the clip token-level
    credit grows large. Reads the step's global mean, so every rank sees the same; no collective.
    """

    def __init__(self, advantage: Any, share: float = 0.25) -> None:
        self.share = share
        self.clip = advantage.reward_clip
        self.level = advantage.reward_clip / advantage.reward_scaling - advantage.reward_bias
        self.token_level = advantage.token_level_anchoring
        self.fired = False

    def observe(self, step: int, metrics: Mapping[str, float]) -> bool:
        """True when this step fired the warning (at most once a run)."""
        at_clip = float(metrics.get("advantage/at_clip_frac", 0.0))
        if self.fired or not at_clip >= self.share:
            return False
        self.fired = True
        if is_rank0():
            log.warning(
                "step %d: %.0f%% of the episodes' shaped rewards sat at advantage.reward_clip "
                "(%g): every reward above %.2f reads the same, so what they earned above it "
                "(R_tool, anchor parts) moved no advantage%s. advantage.reward_clip=40 is a clip "
                "no preset's reward reaches (not shown to train better; the reference keeps "
                "AReaL's 20)",
                step,
                100 * at_clip,
                self.clip,
                self.level,
                ", and token-level credit grows large where a group's rewards are squeezed "
                "against the clip"
                if self.token_level
                else "",
            )
        return True
