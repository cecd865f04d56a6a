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
