"""The decoupled (off-policy corrected) PPO loss, the k1-in-reward KL and the 8B recipes' choices."""

from __future__ import annotations

import math

import pytest
import torch

from paravt.train.losses import LossSettings, kl_reward_to_go, ppo_loss
from paravt.train.recipe import load_recipe


def _settings(**kw):  # type: ignore[no-untyped-def]
    base = dict(clip_eps=0.2, clip_eps_high=None, kl_coef=0.0, aggregation="token-mean")
    base.update(kw)
    return LossSettings(**base)


def test_decoupled_loss_takes_the_ratio_to_the_proximal_policy_and_weights_by_behaviour() -> None:
    logp = torch.tensor([[0.0, -1.0, -1.0, -1.0]], requires_grad=True)
    prox = torch.tensor([[0.0, -1.0, -1.0, -1.0]])  # the policy before the step = logp
    old = torch.tensor([[0.0, -1.5, -1.0, -3.0]])  # behaviour: weights e^0.5, 1, e^2 (> cap 5)
    adv = torch.ones(1, 4)
    mask = torch.tensor([[0.0, 1.0, 1.0, 1.0]])
    parts = ppo_loss(
        logp, old, adv, mask, _settings(behav_imp_weight_cap=5.0), norm=3.0, prox_logp=prox
    )
    # ratio to prox is 1 everywhere (no clipping); token losses -w: -e^0.5, -1, and 0 (w > cap)
    assert parts.loss.item() == pytest.approx((-math.exp(0.5) - 1.0) / 3, rel=1e-6)
    assert parts.clip_fraction == 0.0
    assert parts.behav_masked_fraction == pytest.approx(1 / 3)
    parts.loss.backward()
    assert logp.grad is not None and logp.grad[0, 3] == 0.0  # the dropped token
    # the coupled loss would clip the behaviour mismatch as if it were policy drift
    coupled = ppo_loss(logp.detach(), old, adv, mask, _settings(), norm=3.0)
    assert coupled.clip_fraction == pytest.approx(2 / 3)
    # without a cap every token keeps its weight
    uncapped = ppo_loss(logp.detach(), old, adv, mask, _settings(), norm=3.0, prox_logp=prox)
    assert uncapped.loss.item() == pytest.approx(
        (-math.exp(0.5) - 1.0 - math.exp(2.0)) / 3, rel=1e-6
    )


def test_k1_kl_reward_is_a_return_over_the_trained_tokens() -> None:
    old = [0.0, -1.0, -2.0, -0.5, -1.0]
    ref = [0.0, -1.5, -2.0, -1.5, -0.5]  # k1 = old - ref: 0.5, 0, 1, -0.5
    mask = [0, 1, 1, 0, 1]  # position 3 is a tool token: no reward there
    got = kl_reward_to_go(old, ref, mask, kl_coef=0.1)
    # per-token rewards -0.05, 0, (masked), +0.05 summed from each position to the end
    assert got == pytest.approx([0.0, 0.0, 0.05, 0.0, 0.05])


def test_k1_form_adds_no_kl_term_to_the_loss() -> None:
    logp = torch.tensor([[0.0, -1.0, -1.0]], requires_grad=True)
    ref = torch.tensor([[0.0, -3.0, -3.0]])
    mask = torch.tensor([[0.0, 1.0, 1.0]])
    adv = torch.zeros(1, 3)
    k1_settings = _settings(kl_coef=0.1, kl_form="k1_reward")
    k1 = ppo_loss(logp, logp.detach(), adv, mask, k1_settings, norm=3.0, ref_logp=ref)
    k3 = ppo_loss(logp, logp.detach(), adv, mask, _settings(kl_coef=0.1), norm=3.0, ref_logp=ref)
    assert k1.loss.item() == 0.0 and k1.kl == pytest.approx(2.0)
    assert k3.loss.item() > 0.0


def test_empty_sequences_keep_the_loss_connected_to_the_log_probs() -> None:
    logp = torch.zeros(2, 3, requires_grad=True)
    mask = torch.zeros(2, 3)
    for aggregation in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum"):
        parts = ppo_loss(
            logp,
            logp.detach(),
            torch.ones(2, 3),
            mask,
            _settings(aggregation=aggregation),
            norm=3.0,
        )
        assert parts.loss.requires_grad  # backward reaches the model: a filler pass is symmetric


@pytest.mark.parametrize("name", ["paragrpo_8b", "vanilla_grpo_8b"])
def test_the_8b_rl_recipes_run_the_reference_choices(name: str) -> None:
    recipe = load_recipe(name)
    assert recipe.loss.kl_form == "k1_reward" and recipe.loss.kl_coef == 0.01
    assert recipe.loss.decoupled and recipe.loss.behav_imp_weight_cap == 5.0
    assert recipe.loss.include_subagents_in_loss is False
    assert recipe.distributed.strategy == "fsdp2" and recipe.model.dtype == "bfloat16"
    assert recipe.model.gradient_checkpointing and recipe.advantage.batch_norm
