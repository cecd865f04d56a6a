"""Policy losses: the PPO clipped objective against rollout log-probs plus a k3 KL penalty.

Per token t of a trained sequence (mask 1):

    ratio_t = exp(logp_t - logp_old_t)
    pg_t    = max(-A_t * ratio_t, -A_t * clip(ratio_t, 1 - eps, 1 + eps_high))
    kl_t    = exp(logp_ref_t - logp_t) - (logp_ref_t - logp_t) - 1          (k3, >= 0)
    loss_t  = pg_t + kl_coef * kl_t

reduced by an aggregation registered by name (`AGGREGATIONS`): `token-mean` (all tokens of the
step weigh the same; reference), `seq-mean-token-mean` (each sequence weighs the same) and
`seq-mean-token-sum` (Dr.GRPO-style sums per sequence). Reductions are normalised by the whole
step (`norm`), so gradient accumulation over micro-batches gives the same gradient as one batch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass
class LossParts:
    loss: torch.Tensor  # scalar, already divided by the step normaliser
    pg: float
    kl: float
    clip_fraction: float
    ratio_mean: float
    tokens: float


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Schulman's k3 estimator of KL(pi || ref) per token: exp(r) - r - 1 with r = ref - logp."""
    r = (ref_logp - logp).clamp(-20.0, 20.0)
    return torch.exp(r) - r - 1.0


def _token_sum(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum()


def _seq_mean_token_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    per_seq = (x * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
    return per_seq[mask.sum(-1) > 0].sum()


def _seq_mean_token_sum(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum(-1)[mask.sum(-1) > 0].sum()


# name -> (numerator over a micro-batch, what the step normaliser counts: tokens or sequences)
AGGREGATIONS: dict[str, tuple[Callable[[torch.Tensor, torch.Tensor], torch.Tensor], str]] = {
    "token-mean": (_token_sum, "tokens"),
    "seq-mean-token-mean": (_seq_mean_token_mean, "sequences"),
    "seq-mean-token-sum": (_seq_mean_token_sum, "sequences"),
}


def step_normaliser(aggregation: str, masks: list[list[int]]) -> float:
    """What the summed micro-batch losses of one step are divided by."""
    unit = AGGREGATIONS[aggregation][1]
    if unit == "tokens":
        return float(sum(sum(m) for m in masks)) or 1.0
    return float(sum(1 for m in masks if any(m))) or 1.0


def ppo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    ref_logp: torch.Tensor | None,
    clip_eps: float,
    clip_eps_high: float | None,
    kl_coef: float,
    aggregation: str,
    norm: float,
) -> LossParts:
    """The loss of one micro-batch (tensors of shape (B, T); `mask` 1 on trained tokens)."""
    reduce = AGGREGATIONS[aggregation][0]
    high = clip_eps if clip_eps_high is None else clip_eps_high
    log_ratio = (logp - old_logp).clamp(-20.0, 20.0)
    ratio = torch.exp(log_ratio)
    pg1 = -advantages * ratio
    pg2 = -advantages * ratio.clamp(1.0 - clip_eps, 1.0 + high)
    pg = torch.maximum(pg1, pg2)
    total = pg
    kl_value = 0.0
    n_tok = mask.sum().clamp(min=1.0)
    if ref_logp is not None and kl_coef > 0:
        kl = k3_kl(logp, ref_logp)
        total = pg + kl_coef * kl
        kl_value = float(((kl * mask).sum() / n_tok).detach())
    loss = reduce(total, mask) / norm
    with torch.no_grad():
        clipped = ((pg2 > pg1).float() * mask).sum() / n_tok
        return LossParts(
            loss=loss,
            pg=float((pg * mask).sum() / n_tok),
            kl=kl_value,
            clip_fraction=float(clipped),
            ratio_mean=float((ratio * mask).sum() / n_tok),
            tokens=float(mask.sum()),
        )
