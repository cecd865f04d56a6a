from __future__ import annotations

import math
import subprocess
import sys
from collections import Counter

import pytest

from paravt.rewards import AdvantageConfig, NFramesGate, group_advantages, token_advantages


def test_every_rollout_of_a_prompt_gets_the_same_budget() -> None:
    gate = NFramesGate(seed=3)
    assert len({gate.budget("video-17/q2") for _ in range(8)}) == 1


def test_the_budget_is_stable_across_processes_with_different_hash_salts() -> None:
    code = (
        "from paravt.rewards import NFramesGate; g = NFramesGate(seed=7); "
        "print([g.budget(f'k{i}') for i in range(20)])"
    )
    outs = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": salt, "PATH": ""},
        ).stdout
        for salt in ("1", "2", "3")
    }
    assert len(outs) == 1
    gate = NFramesGate(seed=7)
    assert outs.pop().strip() == str([gate.budget(f"k{i}") for i in range(20)])


def test_budgets_are_uniform_over_the_choices() -> None:
    gate = NFramesGate(seed=0)
    n = 10_000
    counts = Counter(gate.budget(f"sample-{i}") for i in range(n))
    assert set(counts) == {4, 8, 16, 32, 64}
    expected = n / 5
    chi2 = sum((c - expected) ** 2 / expected for c in counts.values())
    assert chi2 < 18.47  # chi-square, 4 degrees of freedom, p = 0.001


def test_seed_and_epoch_redraw_the_budget() -> None:
    keys = [f"k{i}" for i in range(200)]
    a = [NFramesGate(seed=0).budget(k) for k in keys]
    assert a != [NFramesGate(seed=1).budget(k) for k in keys]
    assert a != [NFramesGate(seed=0).budget(k, epoch=1) for k in keys]


def test_a_disabled_gate_returns_the_default_budget() -> None:
    assert NFramesGate(enabled=False, default=64).budget("x") == 64
    with pytest.raises(ValueError):
        NFramesGate(choices=(0, 4))


def test_group_advantages_are_mean_and_std_normalised_per_group() -> None:
    cfg = AdvantageConfig(batch_norm=False)
    adv = group_advantages([1.0, 0.0, 2.0, 2.0], group_size=2, config=cfg)
    # shaped: (r - 0.2) * 10 -> [8, -2]; mean 3, sample std 7.0711
    s = math.sqrt(50)
    assert adv[:2] == pytest.approx([5 / (s + 1e-5), -5 / (s + 1e-5)])
    assert adv[2:] == [0.0, 0.0]  # all-equal group


def test_groups_of_one_and_equal_groups_give_zero_not_nan() -> None:
    adv = group_advantages([0.3, 0.9, 0.9, 0.9], group_size=1)
    assert adv == [0.0] * 4
    assert group_advantages([0.5] * 6, group_size=3) == [0.0] * 6


def test_batch_normalisation_gives_zero_mean_and_unit_std() -> None:
    adv = group_advantages([1, 0, 0, 0.5, 1, 0.2], group_size=3)
    mean = sum(adv) / len(adv)
    std = math.sqrt(sum((a - mean) ** 2 for a in adv) / (len(adv) - 1))
    assert mean == pytest.approx(0, abs=1e-9) and std == pytest.approx(1, abs=1e-4)


def test_dr_grpo_subtracts_the_group_mean_without_dividing() -> None:
    adv = group_advantages([1.0, 0.0], group_size=2, config=AdvantageConfig.dr_grpo())
    assert adv == pytest.approx([5.0, -5.0])


def test_ragged_groups_can_be_given_by_id() -> None:
    cfg = AdvantageConfig.dr_grpo()
    adv = group_advantages([1, 0, 1, 1, 0], group_ids=["a", "b", "a", "b", "b"], config=cfg)
    # group b: shaped [-2, 8, -2], mean 4/3
    assert adv == pytest.approx([0, -10 / 3, 0, 20 / 3, -10 / 3])
    with pytest.raises(ValueError, match="group_ids"):
        group_advantages([1, 0, 1], group_size=2)


def test_token_advantages_broadcast_and_add_the_anchor_vector() -> None:
    out = token_advantages([1.5, -0.5], [3, 2], [[0.0, 0.2, 0.0], None])
    assert out[0] == pytest.approx([1.5, 1.7, 1.5]) and out[1] == [-0.5, -0.5]
    with pytest.raises(ValueError):
        token_advantages([1.0], [3], [[0.1]])
