"""The RL update runs in train mode, so gradient checkpointing is active, even right after an
eval-mode rollout; the decoupled loss's log-prob pass stores proximal log-probs equal to the
policy's own before the step."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from paravt.train.distributed import Backend
from paravt.train.modeling import load_model_and_processor, pick_device
from paravt.train.recipe import load_recipe
from paravt.train.rl import ppo_update
from paravt.train.sft import encode_conversation

from .conftest import tool_conversation


def test_update_trains_in_train_mode_with_checkpointing_and_records_proximal_logprobs(
    tiny_model_path: Path, tmp_path: Path
) -> None:
    from paravt.core.engines.hf import HFEngine

    recipe = load_recipe(
        "tiny_paragrpo",
        [
            f"model.path={tiny_model_path}",
            f"output_dir={tmp_path}",
            "model.gradient_checkpointing=true",
            "loss.decoupled=true",
            "loss.kl_coef=0",
            "loss.micro_batch_size=1",
        ],
    )
    device = pick_device("cpu")
    model, processor = load_model_and_processor(recipe.model, device)
    engine = HFEngine(model, processor)
    seqs = [
        encode_conversation(engine, tool_conversation(c, rgb))
        for c, rgb in [("red", (255, 0, 0)), ("blue", (0, 0, 255))]
    ]
    for s in seqs:
        s.old_logprobs = [-1.0] * len(s)
        s.advantages = [1.0] * len(s)
    backend = Backend(model, recipe.distributed, recipe.optim, recipe.max_steps)
    model.eval()  # as a rollout leaves it
    seen: list[tuple[bool, bool]] = []
    layer = model.model.language_model.layers[0]
    hook = layer.register_forward_pre_hook(
        lambda m, a: seen.append((m.training, torch.is_grad_enabled()))
    )
    metrics = ppo_update(
        backend,
        None,
        seqs,
        recipe,
        pad_id=engine.pad_token_id,
        image_id=engine.image_token_id,
        device=device,
    )
    hook.remove()
    # the gradient passes (grad enabled) ran in train mode, where HF layers checkpoint
    grad_passes = [training for training, grad in seen if grad]
    assert grad_passes and all(grad_passes)
    assert getattr(layer, "gradient_checkpointing", False)
    assert metrics["micro_batches"] == 2.0 and metrics["grad_norm"] > 0
    # proximal log-probs: the policy before the step, at the trained positions
    for s in seqs:
        assert s.prox_logprobs is not None and len(s.prox_logprobs) == len(s)
        trained = [lp for lp, m in zip(s.prox_logprobs, s.mask) if m]
        assert all(lp < 0 for lp in trained)
    # the ratio to prox starts at 1 at the first (only) update (without proximal log-probs it
    # would be the ratio to the rollout's log-probs, about e^-6.6 here; test_guard_decoupled_update
    # checks the loss's value)
    assert metrics["ratio_mean"] == pytest.approx(1.0, abs=1e-4)
