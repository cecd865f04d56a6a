"""`loss.ppo_mini_batches`: an RL step's trajectories in several optimiser steps, so the PPO
ratio clip acts (with one step the ratio to the rollout is 1 and the clip never does); the
learning-rate schedule advances once per RL step. The 2-rank rehearsal (test_distributed.py)
runs two mini-batches over unequal work per rank."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from paravt.train.distributed import Backend
from paravt.train.modeling import collate, load_model_and_processor, pick_device, token_logprobs
from paravt.train.recipe import load_recipe
from paravt.train.rl import ppo_update
from paravt.train.rl.learner import mini_batch_slices
from paravt.train.sft import encode_conversation

from .conftest import tool_conversation


def test_mini_batch_slices_cover_every_micro_batch_once_none_empty() -> None:
    for count in range(1, 12):
        for parts in range(1, 15):
            slices = mini_batch_slices(count, parts)
            covered = [i for sl in slices for i in range(count)[sl]]
            assert covered == list(range(count))
            assert len(slices) == min(parts, count)
            sizes = [sl.stop - sl.start for sl in slices]
            assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1


def _update(model_path: Path, out: Path, mini_batches: int) -> tuple[dict[str, float], int]:
    recipe = load_recipe(
        "tiny_paragrpo",
        [
            f"model.path={model_path}",
            f"output_dir={out}",
            "loss.kl_coef=0",
            "loss.micro_batch_size=1",
            f"loss.ppo_mini_batches={mini_batches}",
            "optim.lr=0.05",
            "optim.warmup_steps=0",  # the recipe warms up from 0: the first step would not move
            "optim.schedule=linear",
            "max_steps=10",
        ],
    )
    device = pick_device("cpu")
    torch.manual_seed(0)
    model, processor = load_model_and_processor(recipe.model, device)
    from paravt.core.engines.hf import HFEngine

    engine = HFEngine(model, processor)
    seqs = [
        encode_conversation(engine, tool_conversation(c, rgb))
        for c, rgb in [("red", (255, 0, 0)), ("blue", (0, 0, 255)), ("green", (0, 255, 0))]
    ]
    with torch.no_grad():  # the rollout's log-probs: the policy's own
        for s in seqs:
            batch = collate(
                [s], pad_id=engine.pad_token_id, image_token_id=engine.image_token_id, device=device
            )
            lp = token_logprobs(
                model, batch, temperature=recipe.rollout.temperature, mask=batch["mask"]
            )
            s.old_logprobs = lp[0].tolist()
            s.advantages = [1.0] * len(s)
    backend = Backend(model, recipe.distributed, recipe.optim, recipe.max_steps)
    before = backend.scheduler.last_epoch
    metrics = ppo_update(
        backend,
        None,
        seqs,
        recipe,
        pad_id=engine.pad_token_id,
        image_id=engine.image_token_id,
        device=device,
    )
    return metrics, backend.scheduler.last_epoch - before


def test_one_mini_batch_never_clips_and_several_do_with_one_schedule_step(
    tiny_model_path: Path, tmp_path: Path
) -> None:
    one, advanced_one = _update(tiny_model_path, tmp_path / "one", 1)
    three, advanced_three = _update(tiny_model_path, tmp_path / "three", 3)
    assert one["optimizer_steps"] == 1 and three["optimizer_steps"] == 3
    # at the only step the ratio to the rollout is 1: nothing to clip
    assert one["ratio_mean"] == pytest.approx(1.0, abs=1e-4)
    assert one["clip_fraction"] == 0.0
    # the second and third steps see a policy moved by the first: the clip acts on them
    assert three["clip_fraction"] > 0.0
    assert three["ratio_mean"] != pytest.approx(1.0, abs=1e-3)
    # the schedule counts RL steps, not optimiser steps
    assert advanced_one == advanced_three == 1
    # every trajectory trained once per epoch in both
    assert one["tokens/trained"] == three["tokens/trained"]
    assert one["micro_batches"] == three["micro_batches"] == 3


def test_more_mini_batches_than_micro_batches_says_so_and_steps_once_per_micro_batch(
    tiny_model_path: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from paravt.train.rl import learner

    learner._warned_fewer_steps.clear()
    with caplog.at_level("WARNING", logger="paravt.train"):
        metrics, _ = _update(tiny_model_path, tmp_path, 5)
    assert metrics["optimizer_steps"] == 3
    assert "loss.ppo_mini_batches=5, but this step has 3 micro-batches" in caplog.text
