"""Guard: with `loss.decoupled=true` the trainer's real update path (`paravt.train.rl.ppo_update`:
log-prob pass -> `ppo_loss`) uses the proximal log-probs, so the loss value depends on them.

The rollout is made stale on purpose: behaviour log-probs `old = pi - 0.5` on trained tokens,
where `pi` is the policy's own log-prob (what the log-prob pass recomputes as proximal), and every
advantage is +1. Then, per trained token (clip_eps 0.2, behaviour weight cap 5):

    decoupled, prox = pi:        ratio 1, weight e^0.5          -> token loss -e^0.5, nothing clipped
    decoupled, prox = pi - 0.3:  ratio e^0.3 > 1.2, weight e^0.2 -> token loss -1.2 e^0.2, all clipped
    decoupled, prox = pi + 1.2:  weight e^1.7 > cap 5           -> token dropped, loss 0
    coupled (or no prox passed): ratio e^0.5 > 1.2, weight 1    -> token loss -1.2, all clipped

so a trainer that passes no proximal log-probs (the decoupled loss silently off) gives the coupled
numbers and fails here. This also replaces test_update_mode.py's `clip_fraction == 0.0`, which
holds with or without proximal log-probs (its old log-probs of -1 make the coupled ratio tiny,
never clipped at advantage +1): here the same data clips every token unless the proximal
log-probs are used.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

import paravt.train.rl as rl
import paravt.train.rl.learner as learner
from paravt.train.distributed import Backend
from paravt.train.modeling import (
    Sequence_,
    collate,
    load_model_and_processor,
    pick_device,
    token_logprobs,
)
from paravt.train.recipe import load_recipe
from paravt.train.sft import encode_conversation

from .conftest import tool_conversation

STALE = 0.5  # behaviour log-probs this far below the policy's on trained tokens


def _recipe(model: Path, out: Path, *, decoupled: bool):  # type: ignore[no-untyped-def]
    return load_recipe(
        "tiny_paragrpo",
        [
            f"model.path={model}",
            f"output_dir={out}",
            f"loss.decoupled={'true' if decoupled else 'false'}",
            "loss.kl_coef=0",
            "loss.clip_eps=0.2",
            "loss.behav_imp_weight_cap=5.0",
            "loss.aggregation=token-mean",
            "loss.micro_batch_size=2",  # one micro-batch: the same batch as the log-probs below
        ],
    )


class _Case:
    """The tiny policy, two encoded tool conversations with stale behaviour log-probs, and a way
    to run one real `update` from the same initial weights each time."""

    def __init__(self, model_path: Path, out: Path) -> None:
        from paravt.core.engines.hf import HFEngine

        self.model_path, self.out = model_path, out
        recipe = _recipe(model_path, out, decoupled=True)
        self.device = pick_device("cpu")
        self.model, processor = load_model_and_processor(recipe.model, self.device)
        engine = HFEngine(self.model, processor)
        self.pad_id, self.image_id = engine.pad_token_id, engine.image_token_id
        self.seqs = [
            encode_conversation(engine, tool_conversation(c, rgb))
            for c, rgb in [("red", (255, 0, 0)), ("blue", (0, 0, 255))]
        ]
        batch = collate(
            self.seqs, pad_id=self.pad_id, image_token_id=self.image_id, device=self.device
        )
        with torch.no_grad():
            own = token_logprobs(
                self.model,
                batch,
                temperature=recipe.rollout.temperature,
                mask=batch["mask"],
                chunk=recipe.model.logprob_chunk_tokens,
            )
        for i, s in enumerate(self.seqs):
            assert s.mask[0] == 0  # every trained token has a prediction
            s.old_logprobs = [float(own[i, t]) - STALE if m else 0.0 for t, m in enumerate(s.mask)]
            s.advantages = [1.0] * len(s)
        self.initial = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        self.trained = sum(sum(s.mask) for s in self.seqs)

    def update(self, *, decoupled: bool) -> dict[str, float]:
        self.model.load_state_dict(self.initial)
        recipe = _recipe(self.model_path, self.out, decoupled=decoupled)
        backend = Backend(self.model, recipe.distributed, recipe.optim, recipe.max_steps)
        seqs = [
            Sequence_(s.token_ids, s.mask, s.media, list(s.old_logprobs or []), s.advantages)
            for s in self.seqs
        ]
        metrics = rl.ppo_update(
            backend,
            None,
            seqs,
            recipe,
            pad_id=self.pad_id,
            image_id=self.image_id,
            device=self.device,
        )
        assert metrics["tokens/trained"] == metrics["loss/normaliser"] == self.trained
        return metrics


@pytest.fixture(scope="module")
def case(tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> _Case:
    return _Case(tiny_model_path, tmp_path_factory.mktemp("decoupled"))


def _shift_proximal(monkeypatch: pytest.MonkeyPatch, shift: float) -> None:
    """The trainer's own log-prob pass, then its proximal log-probs moved by `shift` on trained
    tokens (everything after it is the real update)."""
    real = learner.logprob_pass

    def shifted(backend: Any, ref_model: Any, mbs: Any, recipe: Any, **kw: Any) -> None:
        real(backend, ref_model, mbs, recipe, **kw)
        for mb in mbs:
            for s in mb:
                assert s.prox_logprobs is not None
                s.prox_logprobs = [p + shift if m else p for p, m in zip(s.prox_logprobs, s.mask)]

    monkeypatch.setattr(learner, "logprob_pass", shifted)  # where `update` looks it up


def test_the_coupled_loss_clips_every_token_of_the_stale_rollout(case: _Case) -> None:
    # the control: without proximal log-probs the ratio to the behaviour policy is e^0.5 > 1.2
    m = case.update(decoupled=False)
    assert m["clip_fraction"] == pytest.approx(1.0)
    assert m["ratio_mean"] == pytest.approx(math.exp(STALE), rel=1e-4)
    assert m["loss"] == pytest.approx(-1.2, rel=1e-4)
    assert m["behav_weight_mean"] == 1.0


def test_the_decoupled_update_weights_by_behaviour_and_takes_the_ratio_to_the_proximal_policy(
    case: _Case,
) -> None:
    m = case.update(decoupled=True)
    # the ratio to the proximal policy (the policy itself) is 1: nothing clipped, although the
    # same tokens are all clipped by the coupled loss (the test above)
    assert m["clip_fraction"] == 0.0
    assert m["ratio_mean"] == pytest.approx(1.0, abs=1e-4)
    assert m["behav_weight_mean"] == pytest.approx(math.exp(STALE), rel=1e-4)
    assert m["behav_masked_fraction"] == 0.0
    assert m["loss"] == pytest.approx(-math.exp(STALE), rel=1e-4)


@pytest.mark.parametrize(
    ("shift", "loss", "clipped", "dropped"),
    [
        (-0.3, -1.2 * math.exp(STALE - 0.3), 1.0, 0.0),  # ratio e^0.3 clipped at 1.2
        (1.2, 0.0, 0.0, 1.0),  # behaviour weight e^1.7 above the cap: every token dropped
    ],
)
def test_the_proximal_logprobs_change_the_loss_of_the_real_update(
    case: _Case,
    monkeypatch: pytest.MonkeyPatch,
    shift: float,
    loss: float,
    clipped: float,
    dropped: float,
) -> None:
    _shift_proximal(monkeypatch, shift)
    m = case.update(decoupled=True)
    assert m["loss"] == pytest.approx(loss, rel=1e-4, abs=1e-6)
    assert m["loss"] != pytest.approx(-math.exp(STALE), rel=1e-2)  # unshifted: a different value
    assert m["clip_fraction"] == pytest.approx(clipped)
    assert m["behav_masked_fraction"] == pytest.approx(dropped)
