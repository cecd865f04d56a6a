"""RL: an end-to-end PARA-GRPO step with real sub-agent rollouts, its loss and its metrics."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from paravt.train.losses import LossSettings, k3_kl, ppo_loss, step_normaliser
from paravt.train.recipe import load_recipe
from paravt.train.rl import NoSignalWatch, train_rl, zero_groups_frac

from .rl_helpers import EveryOtherScripted, examples

REQUIRED_METRICS = (
    "reward/total",
    "reward/accuracy",
    "reward/format",
    "reward/anchor",
    "reward/tool",
    "f_tau",
    "kappa",
    "calls_per_turn",
    "accuracy",
    "len/main_generated",
    "len/subagent_generated",
    "gating/k_mean",
    "clip_fraction",
    "kl",
    "grad_norm",
    "loss",
    "time/rollout_s",
    "time/reward_s",
    "time/update_s",
)


def tiny_rl_recipe(model: Path, out: Path, *extra: str):  # type: ignore[no-untyped-def]
    return load_recipe(
        "tiny_paragrpo",
        [
            f"model.path={model}",
            f"output_dir={out}",
            "max_steps=2",
            "rollout.batch_prompts=2",
            "rollout.group_size=2",
            "rollout.max_new_tokens=12",
            "rollout.subagent_max_new_tokens=8",
            "rollout.max_turns=2",
            "gating.choices=[2,4]",
            "checkpoint.every_steps=0",
            "logging.progress=false",
            "optim.lr=1e-3",
            *extra,
        ],
    )


def scripted(engine):  # type: ignore[no-untyped-def]
    return EveryOtherScripted(engine)


@pytest.mark.slow
def test_an_rl_step_runs_end_to_end_with_real_subagents_and_logs_every_metric(
    tiny_model_path: Path, tmp_path: Path
) -> None:
    exs, frames = examples()
    recipe = tiny_rl_recipe(tiny_model_path, tmp_path / "run")
    final = train_rl(recipe, examples=exs, frames=frames, wrap_engine=scripted)
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        for key in REQUIRED_METRICS:
            assert key in row and row[key] is not None, key
        assert math.isfinite(row["loss"]) and row["grad_norm"] > 0
        # half the rollouts call crop_video twice (scripted), the random model's others do not
        assert row["kappa"] >= 1.0 and row["tool_use_rate"] >= 0.5
        assert row["subagents_per_episode"] >= 1.0  # one real sub-agent generation per call
        assert row["len/subagent_generated"] > 0
        # 2 prompts x 2 rollouts (main trajectories) + every sub-agent trajectory
        assert row["trajectories/trained"] == 4 + 4 * row["subagents_per_episode"]
        assert row["gating/k_mean"] in (2.0, 3.0, 4.0)
    # Every rollout of a prompt saw the same gated overview budget.
    assert set(frames.budgets) <= {2, 4}
    from transformers import AutoModelForImageTextToText

    before = AutoModelForImageTextToText.from_pretrained(tiny_model_path).state_dict()
    after = AutoModelForImageTextToText.from_pretrained(final).state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)


@pytest.mark.slow
def test_subagent_trajectories_are_left_out_of_the_loss_when_asked(
    tiny_model_path: Path, tmp_path: Path
) -> None:
    exs, frames = examples()
    recipe = tiny_rl_recipe(
        tiny_model_path,
        tmp_path / "run",
        "max_steps=1",
        "loss.include_subagents_in_loss=false",
        "checkpoint.save_final=false",
    )
    train_rl(recipe, examples=exs, frames=frames, wrap_engine=scripted)
    row = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert row["trajectories/trained"] == 4 and row["subagents_per_episode"] >= 1.0


def test_groups_with_equal_rewards_are_counted_and_a_run_of_such_steps_is_named(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert zero_groups_frac([1.0, 1.0, 0.0, 2.0, 0.5, 0.5], group_size=2) == pytest.approx(2 / 3)
    assert zero_groups_frac([0.1, 0.1, 0.1, 0.1], group_size=4) == 1.0
    watch = NoSignalWatch(after=3)
    with caplog.at_level("WARNING", logger="paravt.train"):
        for step, frac in enumerate([1.0, 1.0, 0.5, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0], start=1):
            watch.observe(step, frac)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2  # after 3 steps in a row (4-6), again after 3 more (4-9)
    assert lines[0].startswith("steps 4-6: no learning signal")
    assert lines[1].startswith("steps 4-9: no learning signal")
    assert "untrained or random model" in lines[0] and "reward that cannot vary" in lines[0]
    assert watch.streak == 0
    NoSignalWatch(after=0).observe(1, 1.0)  # 0: never warns
    assert len(caplog.records) == 2


@pytest.mark.slow
def test_steps_without_learning_signal_are_in_the_metrics_and_warned_about(
    tiny_model_path: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Every rollout gives the same answer: every group's rewards are equal."""
    from paravt.core.engines.scripted import ScriptedTurns

    exs, frames = examples()
    recipe = tiny_rl_recipe(
        tiny_model_path, tmp_path / "run", "max_steps=3", "checkpoint.save_final=false"
    )
    same = {1: "I know it.</think><answer>red</answer>"}
    with caplog.at_level("WARNING", logger="paravt.train"):
        train_rl(recipe, examples=exs, frames=frames, wrap_engine=lambda e: ScriptedTurns(e, same))
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["advantage/zero_groups_frac"] for r in rows] == [1.0, 1.0, 1.0]
    (warning,) = [r.getMessage() for r in caplog.records if "zero_groups_frac" in r.getMessage()]
    assert warning.startswith("steps 1-3:")


def test_the_ppo_loss_clips_the_ratio_and_the_k3_kl_is_zero_at_the_reference() -> None:
    logp = torch.tensor([[0.0, -1.0, -1.0, -1.0]], requires_grad=True)
    old = torch.tensor([[0.0, -1.0, -2.0, -0.5]])  # ratios 1, e, e^-0.5
    adv = torch.ones(1, 4)
    mask = torch.tensor([[0.0, 1.0, 1.0, 1.0]])
    parts = ppo_loss(
        logp,
        old,
        adv,
        mask,
        LossSettings(clip_eps=0.2, clip_eps_high=None, kl_coef=0.1, aggregation="token-mean"),
        norm=3.0,
        ref_logp=logp.detach(),
    )
    # token losses: -1, -min(e, 1.2) = -1.2, -exp(-0.5) (unclipped on the low side for A > 0)
    expected = (-1.0 - 1.2 - math.exp(-0.5)) / 3
    assert parts.loss.item() == pytest.approx(expected, rel=1e-5)
    assert parts.clip_fraction == pytest.approx(1 / 3)
    assert parts.kl == 0.0
    parts.loss.backward()
    assert logp.grad is not None and logp.grad[0, 2] == 0.0  # the clipped token gets no gradient
    assert (k3_kl(torch.tensor([0.0]), torch.tensor([-1.0])) > 0).all()


def test_aggregations_normalise_by_tokens_or_sequences() -> None:
    masks = [[0, 1, 1, 1], [0, 1, 0, 0], [0, 0, 0, 0]]
    assert step_normaliser("token-mean", masks) == 4.0
    assert step_normaliser("seq-mean-token-mean", masks) == 2.0


@pytest.mark.slow
def test_token_level_anchoring_trains_with_anchor_credit_in_the_advantage_units(
    tiny_model_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The anchor term is measured against the group and scaled like the advantage: on every
    main trajectory the per-token advantages differ from the sequence's base value only on the
    structural tokens, and by no more than the anchor's largest part in advantage units (the
    earlier form added the raw reward times reward_scaling: +2.0 on every `</think>`)."""
    import paravt.train.rl.run as run_module
    from paravt.train.rl import scoring

    seen: list[tuple[list[float], list[float], float]] = []

    def recording(ro, engine, reward_config, advantage, **kw):  # type: ignore[no-untyped-def]
        seqs = scoring.training_sequences(ro, engine, reward_config, advantage, **kw)
        for ep, adv in zip(ro.episodes, ro.advantages):
            main = next(s for s in seqs if s.token_ids is ep.main.token_ids)
            seen.append((list(main.advantages or []), list(ro.anchor_scales), adv))
        return seqs

    monkeypatch.setattr(run_module, "training_sequences", recording)
    exs, frames = examples()
    recipe = tiny_rl_recipe(
        tiny_model_path,
        tmp_path / "run",
        "max_steps=1",
        "advantage.token_level_anchoring=true",
        "reward.overrides.anchor_tool_calls=true",
        "checkpoint.save_final=false",
    )
    train_rl(recipe, examples=exs, frames=frames, wrap_engine=scripted)
    row = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert math.isfinite(row["loss"])
    assert seen
    for advs, scales, _ in seen:
        base = max(set(advs), key=advs.count)  # the outcome share, on every content token
        top = max(scales) * 0.5 * 0.7  # lambda x the anchor's largest total, in advantage units
        assert all(abs(a - base) <= top + 1e-6 for a in advs)
