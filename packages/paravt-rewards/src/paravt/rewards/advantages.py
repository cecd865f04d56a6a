"""GRPO advantage math on plain Python sequences (no torch, no numpy).

Pipeline (reference order, as in AReaL): reward shaping `clip((r + bias) * scaling, +-clip)` ->
group normalisation (subtract the group mean; divide by the group std + eps unless Dr.GRPO) ->
optional batch normalisation (mean/std over the whole batch) -> optionally broadcast to tokens,
adding the token-level anchoring vector on structural tokens.

Groups of size 1 and groups whose rewards are all equal get advantage 0 (never NaN).
Estimators are registered by name (`ADVANTAGE_ESTIMATORS`), so a recipe picks `grpo` or
`dr_grpo` without touching the trainer.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Estimator = Literal["grpo", "dr_grpo"]


class AdvantageConfig(BaseModel):
    """How rewards become advantages. Defaults are the reference PARA-GRPO RL settings."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    estimator: Estimator = Field(
        "grpo", description="'grpo': (r - mean) / (std + eps) per group; 'dr_grpo': r - mean."
    )
    reward_scaling: float = Field(10.0, description="Rewards are multiplied by this...")
    reward_bias: float = Field(-0.2, description="...after this is added (reference: -0.2).")
    reward_clip: float = Field(20.0, gt=0, description="Shaped rewards are clipped to +-this.")
    eps: float = Field(1e-5, gt=0, description="Added to a std before dividing by it.")
    unbiased_std: bool = Field(True, description="Sample std (n - 1); False: population std.")
    batch_norm: bool = Field(
        True, description="Normalise the advantages over the batch (mean and std) afterwards."
    )

    @classmethod
    def paragrpo(cls) -> AdvantageConfig:
        """Reference: scaling 10, bias -0.2, group mean/std, batch mean/std."""
        return cls()

    @classmethod
    def dr_grpo(cls) -> AdvantageConfig:
        """Dr.GRPO: group mean only, no std division anywhere."""
        return cls(estimator="dr_grpo", batch_norm=False)


def _mean(xs: Sequence[float]) -> float:
    return math.fsum(xs) / len(xs) if xs else 0.0


def _std(xs: Sequence[float], unbiased: bool) -> float:
    n = len(xs)
    if n < 2:
        return 0.0
    m = _mean(xs)
    var = math.fsum((x - m) ** 2 for x in xs) / (n - 1 if unbiased else n)
    return math.sqrt(var)


def _finite(x: float) -> float:
    return x if math.isfinite(x) else 0.0


def shape_rewards(rewards: Sequence[float], config: AdvantageConfig) -> list[float]:
    """`clip((r + bias) * scaling, -clip, clip)`; non-finite rewards count as 0."""
    c = config.reward_clip
    return [
        min(c, max(-c, (_finite(float(r)) + config.reward_bias) * config.reward_scaling))
        for r in rewards
    ]


def _grpo(group: Sequence[float], config: AdvantageConfig) -> list[float]:
    m = _mean(group)
    std = _std(group, config.unbiased_std)
    if std == 0.0:  # size-1 and all-equal groups carry no preference
        return [0.0] * len(group)
    return [(x - m) / (std + config.eps) for x in group]


def _dr_grpo(group: Sequence[float], config: AdvantageConfig) -> list[float]:
    m = _mean(group)
    return [x - m if len(group) > 1 else 0.0 for x in group]


ADVANTAGE_ESTIMATORS: dict[str, Callable[[Sequence[float], AdvantageConfig], list[float]]] = {
    "grpo": _grpo,
    "dr_grpo": _dr_grpo,
}


def _groups(n: int, group_size: int | None, group_ids: Sequence[object] | None) -> list[list[int]]:
    if group_ids is not None:
        if len(group_ids) != n:
            raise ValueError(f"group_ids has {len(group_ids)} entries for {n} rewards")
        by: dict[object, list[int]] = {}
        for i, g in enumerate(group_ids):
            by.setdefault(g, []).append(i)
        return list(by.values())
    if group_size is None or group_size < 1:
        raise ValueError("give group_size (rollouts per prompt, consecutive) or group_ids")
    if n % group_size:
        raise ValueError(
            f"{n} rewards do not split into groups of {group_size}; pass group_ids for ragged groups"
        )
    return [list(range(s, s + group_size)) for s in range(0, n, group_size)]


def batch_normalize(
    values: Sequence[float], eps: float = 1e-5, unbiased: bool = True
) -> list[float]:
    """`(v - mean) / (std + eps)` over the whole batch; all-equal values give zeros."""
    m, std = _mean(values), _std(values, unbiased)
    if std == 0.0:
        return [0.0] * len(values)
    return [(v - m) / (std + eps) for v in values]


def group_advantages(
    rewards: Sequence[float],
    group_size: int | None = None,
    *,
    group_ids: Sequence[object] | None = None,
    config: AdvantageConfig | None = None,
) -> list[float]:
    """One advantage per reward.

    In: rewards in rollout order, and either `group_size` (consecutive rollouts of one prompt) or
    `group_ids` (any hashable per rollout, for ragged or interleaved groups). Out: advantages after
    shaping, the configured estimator per group and optional batch normalisation.
    """
    config = config or AdvantageConfig()
    shaped = shape_rewards(rewards, config)
    estimator = ADVANTAGE_ESTIMATORS[config.estimator]
    out = [0.0] * len(shaped)
    for idx in _groups(len(shaped), group_size, group_ids):
        for i, a in zip(idx, estimator([shaped[i] for i in idx], config)):
            out[i] = a
    if config.batch_norm:
        out = batch_normalize(out, config.eps, config.unbiased_std)
    return out


def token_advantages(
    advantages: Sequence[float],
    num_tokens: Sequence[int],
    token_rewards: Sequence[Sequence[float] | None] | None = None,
    *,
    anchor_scale: float = 1.0,
) -> list[list[float]]:
    """Per-token advantages: each sequence's advantage on every one of its tokens, plus
    `anchor_scale` times its token-level anchoring vector (non-zero only on structural tokens).

    The anchor credit is token-local and not group-normalised: it acts exactly at the structural
    positions, while every other token (tool-call content included) carries the outcome advantage.
    """
    if len(num_tokens) != len(advantages):
        raise ValueError(f"{len(num_tokens)} token counts for {len(advantages)} advantages")
    out = []
    for i, (adv, n) in enumerate(zip(advantages, num_tokens)):
        row = [float(adv)] * n
        vec = token_rewards[i] if token_rewards is not None else None
        if vec is not None:
            if len(vec) != n:
                raise ValueError(f"sequence {i}: {len(vec)} token rewards for {n} tokens")
            row = [a + anchor_scale * v for a, v in zip(row, vec)]
        out.append(row)
    return out


def advantage_scales(
    rewards: Sequence[float],
    group_size: int | None = None,
    *,
    group_ids: Sequence[object] | None = None,
    config: AdvantageConfig | None = None,
    at_clip: Literal["zero", "group"] = "zero",
) -> list[float]:
    """How far one unit of reward moves each rollout's advantage under `group_advantages`, the
    group's and the batch's statistics held fixed: `scaling / (group std + eps)` ('grpo'; 'dr_grpo':
    `scaling`), divided by `batch std + eps` with batch normalisation. 0 where the rollout's
    advantage is 0 for want of a preference (a group of one, an all-equal group), and, with
    `at_clip="zero"`, where its shaped reward sits at the clip (one more unit of reward would not
    move it). `at_clip="group"` gives such a rollout its group's rate all the same: the rate for
    a change of its *shaped* reward, which is what `anchor_advantages` needs beside
    `anchor_fractions` (the fractions carry the clip). This is the exchange rate from reward
    units to advantage units that token-level credit needs."""
    config = config or AdvantageConfig()
    shaped = shape_rewards(rewards, config)
    out = [0.0] * len(shaped)
    group_adv = [0.0] * len(shaped)
    estimator = ADVANTAGE_ESTIMATORS[config.estimator]
    for idx in _groups(len(shaped), group_size, group_ids):
        group = [shaped[i] for i in idx]
        std = _std(group, config.unbiased_std)
        for i, a in zip(idx, estimator(group, config)):
            group_adv[i] = a
        if len(idx) < 2 or (config.estimator == "grpo" and std == 0.0):
            continue
        k = config.reward_scaling / (std + config.eps if config.estimator == "grpo" else 1.0)
        for i in idx:
            clipped = at_clip == "zero" and abs(shaped[i]) >= config.reward_clip
            out[i] = 0.0 if clipped else k
    if config.batch_norm:
        std = _std(group_adv, config.unbiased_std)
        out = [k / (std + config.eps) if std else 0.0 for k in out]
    return out


def anchor_fractions(
    rewards: Sequence[float],
    anchor_totals: Sequence[float],
    config: AdvantageConfig | None = None,
) -> list[float]:
    """Per rollout, the fraction of its anchor total that reached its shaped reward:
    `(shape(r + T) - shape(r)) / (scaling * T)` with `shape` = `shape_rewards` (bias, scaling,
    clip). 1 where the clip does not bind (and where T is 0), 0 where `r` alone already sits at
    the clip, in between where the anchor carries it there.

    `rewards` are the sequence rewards without the anchor parts, `anchor_totals` the parts' sum
    per rollout (what token-level anchoring adds before the advantage is computed). With the
    released settings (scaling 10, bias -0.2, clip 20) every reward above 2.2 sits at the clip,
    and a right answer with a call often does: its anchor parts then moved nothing, and counting
    them at full value in the group's mean (as `anchor_advantages` did before these fractions)
    took a share the advantage never held from the other rollouts, so a rollout that scored
    below its group was pushed up on every token."""
    config = config or AdvantageConfig()
    if len(anchor_totals) != len(rewards):
        raise ValueError(f"{len(anchor_totals)} anchor totals for {len(rewards)} rewards")
    with_anchor = shape_rewards([_finite(r) + t for r, t in zip(rewards, anchor_totals)], config)
    without = shape_rewards(rewards, config)
    out = []
    for t, a, b in zip(anchor_totals, with_anchor, without):
        linear = _finite(t) * config.reward_scaling
        out.append(1.0 if linear == 0 else (a - b) / linear)
    return out


def anchor_advantages(
    parts: Sequence[Sequence[tuple[str, float, Sequence[int]]]],
    scales: Sequence[float],
    group_size: int | None = None,
    *,
    fractions: Sequence[float],
    group_ids: Sequence[object] | None = None,
) -> tuple[list[dict[int, float]], list[float]]:
    """Token-level anchoring in the advantage's units, with the group as its baseline.

    In: per rollout the anchor parts it earned (`paravt.rewards.anchoring.AnchorPart`: a name, its
    value in reward units, its token indices; one part name may come from several turns), per
    rollout `advantage_scales(..., at_clip="group")` of the rewards its advantage was computed
    from (the sequence reward plus its anchor total), and per rollout `anchor_fractions(...)`:
    how much of its anchor total reached its shaped reward (the clip). Out: per rollout
    `{token: anchor advantage}` and per rollout the anchor's share of its sequence advantage,
    `scale * (f T - mean f T over the group)`.

    A part's credit is its value times the rollout's fraction minus the group's mean of that
    (an episode that did not earn the part counts 0, and so does one whose fraction is 0: the
    clip cancelled its anchor, so its structural tokens carry what its other tokens carry), times
    the rollout's scale, split evenly over its tokens: a structural token that every rollout of
    the group gets right carries nothing, one that only some get right is pushed up in those and
    its absence lowers the others' sequence share. With advantages computed on `reward + anchor
    total`, `sequence advantage - share` on every token is exactly the advantage the reward alone
    gets at the same group and batch statistics, also where shaped rewards reach the clip, and
    the token credit on top is the anchor's share moved onto the tokens that earned it. `fractions` has no
    default: without them (all 1) the decomposition holds only where no shaped reward reaches
    the clip, and silently pays the rollouts below the clip for the anchor of those at it.
    """
    n = len(parts)
    if len(scales) != n:
        raise ValueError(f"{len(scales)} scales for {n} rollouts")
    if len(fractions) != n:
        raise ValueError(f"{len(fractions)} fractions for {n} rollouts")
    merged: list[dict[str, tuple[float, set[int]]]] = []
    for rollout, f in zip(parts, fractions):
        by_name: dict[str, tuple[float, set[int]]] = {}
        for name, value, tokens in rollout:
            v, toks = by_name.get(name, (0.0, set()))
            # a part the clip cancelled (fraction 0) counts as not earned: its tokens are
            # neither pushed up nor down, and its miss stays in the share (every token)
            by_name[name] = (v + value * f, toks | (set(tokens) if f else set()))
        merged.append(by_name)
    credits: list[dict[int, float]] = [{} for _ in range(n)]
    shares = [0.0] * n
    for idx in _groups(n, group_size, group_ids):
        names = {name for i in idx for name in merged[i]}
        means = {
            name: math.fsum(merged[i].get(name, (0.0, set()))[0] for i in idx) / len(idx)
            for name in names
        }
        for i in idx:
            k = scales[i]
            shares[i] = k * math.fsum(merged[i].get(p, (0.0, set()))[0] - means[p] for p in names)
            for name, (value, earned_by) in merged[i].items():
                if not earned_by:
                    continue
                per_token = k * (value - means[name]) / len(earned_by)
                for t in earned_by:
                    credits[i][t] = credits[i].get(t, 0.0) + per_token
    return credits, shares
