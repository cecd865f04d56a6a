"""Policy losses: the PPO clipped objective, optionally decoupled (off-policy corrected), and the
KL term to a frozen reference in either of two forms.

Per token t of a trained sequence (mask 1), with behaviour log-probs `old` (what the rollout
engine sampled with), proximal log-probs `prox` (the policy before this step, recomputed by the
trainer) and the current `logp`:

    coupled (PPO):    ratio_t = exp(logp_t - old_t),   w_t = 1
    decoupled:        ratio_t = exp(logp_t - prox_t),  w_t = exp(prox_t - old_t), and w_t = 0
                      where w_t > behav_imp_weight_cap (AReaL's decoupled PPO: engine/trainer
                      mismatch is importance-weighted, not clipped as if it were policy drift)
    pg_t    = w_t * max(-A_t * ratio_t, -A_t * clip(ratio_t, 1 - eps, 1 + eps_high))

KL (`kl_form`):
    k3_loss:   loss_t = pg_t + kl_coef * (exp(r) - r - 1),  r = ref_t - logp_t       (Schulman k3)
    k1_reward: the per-token reward gets -kl_coef * (old_t - ref_t) before advantages
               (`kl_reward_to_go`; AReaL's form, the reference's); the loss is pg_t alone.

reduced by an aggregation registered by name (`AGGREGATIONS`): `token-mean` (all tokens of the
step weigh the same; reference), `seq-mean-token-mean` (each sequence weighs the same) and
`seq-mean-token-sum` (Dr.GRPO-style sums per sequence). Reductions are normalised by the whole
step over all ranks (`norm`), so gradient accumulation over micro-batches and ranks gives the
gradient of one global batch.
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
    behav_weight_mean: float = 1.0  # decoupled: mean exp(prox - old) over trained tokens
    behav_masked_fraction: float = 0.0  # decoupled: tokens dropped for w > cap


def kl_reward_to_go(
    old_logp: list[float], ref_logp: list[float], mask: list[int], kl_coef: float
) -> list[float]:
    """AReaL's KL-in-reward term of one sequence's per-token advantages: the per-token reward
    -kl_coef * (old_t - ref_t) (k1) on trained tokens, summed from t to the end (returns with
    gamma = lambda = 1 and no critic), to be added to the outcome advantage."""
    out = [0.0] * len(mask)
    running = 0.0
    for t in range(len(mask) - 1, -1, -1):
        if mask[t]:
            running += -kl_coef * (float(old_logp[t]) - float(ref_logp[t]))
            out[t] = running
    return out


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Schulman's k3 estimator of KL(pi || ref) per token: exp(r) - r - 1 with r = ref - logp."""
    r = (ref_logp - logp).clamp(-20.0, 20.0)
    return torch.exp(r) - r - 1.0


def _token_sum(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum()


# (sequences without trained tokens contribute 0 * x, never an empty selection: the graph must
# reach every parameter the forward used, see modeling.token_logprobs)
def _seq_mean_token_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    per_seq = (x * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
    return per_seq.sum()


def _seq_mean_token_sum(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum(-1).sum()


# name -> (numerator over a micro-batch, what the step normaliser counts: tokens or sequences)
AGGREGATIONS: dict[str, tuple[Callable[[torch.Tensor, torch.Tensor], torch.Tensor], str]] = {
    "token-mean": (_token_sum, "tokens"),
    "seq-mean-token-mean": (_seq_mean_token_mean, "sequences"),
    "seq-mean-token-sum": (_seq_mean_token_sum, "sequences"),
}


def step_normaliser(aggregation: str, masks: list[list[int]]) -> float:
    """What the summed micro-batch losses of one step are divided by, over `masks`: trained
    tokens or trained sequences, 0 for none. The trainer sums it over ranks
    (`paravt.train.process_group.all_reduce_sum`) and only then guards against 0: a rank with
    nothing to train adds nothing (a floor of 1 per rank would make the global divisor one too
    large for each such rank)."""
    unit = AGGREGATIONS[aggregation][1]
    if unit == "tokens":
        return float(sum(sum(m) for m in masks))
    return float(sum(1 for m in masks if any(m)))


@dataclass(frozen=True)
class LossSettings:
    """What `ppo_loss` is set by (the recipe's `loss` section: `LossSpec`): the clip epsilons
    (`clip_eps_high` None: `clip_eps` on both sides), the KL weight and form, the aggregation
    (`AGGREGATIONS`) and the decoupled loss's cap on behaviour weights (None: no cap)."""

    clip_eps: float
    clip_eps_high: float | None
    kl_coef: float
    aggregation: str
    behav_imp_weight_cap: float | None = None
    kl_form: str = "k3_loss"


def ppo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    settings: LossSettings,
    *,
    norm: float,
    ref_logp: torch.Tensor | None = None,
    prox_logp: torch.Tensor | None = None,
) -> LossParts:
    """The loss of one micro-batch (tensors of shape (B, T); `mask` 1 on trained tokens), divided
    by the step normaliser `norm`.

    `prox_logp` switches on the decoupled loss (see module docstring), where tokens whose
    behaviour weight exceeds `settings.behav_imp_weight_cap` are dropped. `ref_logp` (None: no
    KL) enters the loss with `kl_form="k3_loss"`; with `"k1_reward"` the KL is already in
    `advantages` and `ref_logp` is only reported.
    """
    clip_eps, kl_coef, cap = settings.clip_eps, settings.kl_coef, settings.behav_imp_weight_cap
    reduce = AGGREGATIONS[settings.aggregation][0]
    high = clip_eps if settings.clip_eps_high is None else settings.clip_eps_high
    anchor = old_logp if prox_logp is None else prox_logp
    log_ratio = (logp - anchor).clamp(-20.0, 20.0)
    ratio = torch.exp(log_ratio)
    pg1 = -advantages * ratio
    pg2 = -advantages * ratio.clamp(1.0 - clip_eps, 1.0 + high)
    pg = torch.maximum(pg1, pg2)
    n_tok = mask.sum().clamp(min=1.0)
    behav_mean, behav_masked = 1.0, 0.0
    if prox_logp is not None:
        with torch.no_grad():
            behav = torch.exp((prox_logp - old_logp).clamp(-20.0, 20.0))
            keep = torch.ones_like(behav, dtype=torch.bool)
            if cap is not None:
                keep = behav <= cap
            weight = torch.where(keep, behav, torch.zeros_like(behav))
            behav_mean = float((behav * mask).sum() / n_tok)
            behav_masked = float(((~keep).float() * mask).sum() / n_tok)
        pg = pg * weight
    total = pg
    kl_value = 0.0
    if ref_logp is not None and kl_coef > 0:
        if settings.kl_form == "k3_loss":
            kl = k3_kl(logp, ref_logp)
            total = pg + kl_coef * kl
        else:
            kl = (old_logp - ref_logp).detach()  # k1 of behaviour vs reference, as rewarded
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
            behav_weight_mean=behav_mean,
            behav_masked_fraction=behav_masked,
        )
