from __future__ import annotations

import math
import subprocess
import sys
from collections import Counter

import pytest

from paravt.rewards import (
    AdvantageConfig,
    NFramesGate,
    group_advantages,
    shape_rewards,
    token_advantages,
)


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


# ---------------------------------------------------------------- token credit in advantage units


@pytest.mark.parametrize("estimator", ["grpo", "dr_grpo"])
@pytest.mark.parametrize("batch_norm", [True, False])
def test_advantage_scales_are_the_exchange_rate_from_reward_to_advantage(
    estimator: str, batch_norm: bool
) -> None:
    """advantage = scale * (reward - its group's mean) + one constant for the batch (the batch
    mean): the rate at which a reward above the group's mean becomes advantage."""
    from paravt.rewards import advantage_scales

    config = AdvantageConfig(estimator=estimator, batch_norm=batch_norm)  # type: ignore[arg-type]
    rewards = [0.3, 1.4, 2.0, 0.9, 1.0, 1.0, 1.0, 1.0, 1.8, 0.1, 1.7, 1.1]  # inside the clip
    scales = advantage_scales(rewards, 4, config=config)
    advantages = group_advantages(rewards, 4, config=config)
    offsets = []
    for g in range(0, 12, 4):
        mean = sum(rewards[g : g + 4]) / 4
        for i in range(g, g + 4):
            offsets.append(advantages[i] - scales[i] * (rewards[i] - mean))
    if estimator == "grpo":  # the all-equal group carries no preference: scale 0
        assert scales[4:8] == [0.0] * 4
    assert all(k > 0 for k in scales[:4] + scales[8:])
    assert offsets == pytest.approx([offsets[0]] * 12, abs=1e-9)
    assert batch_norm or offsets[0] == pytest.approx(0.0, abs=1e-9)
    # a shaped reward at the clip does not move: no exchange
    clipped = advantage_scales([0.0, 5.0, 1.0, 0.5], 4, config=config)
    assert clipped[1] == 0.0 and clipped[0] > 0
    # ... unless asked for the group's rate (token-level anchoring, whose fractions carry the clip)
    rate = advantage_scales([0.0, 5.0, 1.0, 0.5], 4, config=config, at_clip="group")
    assert rate == pytest.approx([clipped[0]] * 4)


def test_anchor_credit_is_measured_against_the_group_and_sums_to_the_share() -> None:
    from paravt.rewards import anchor_advantages

    close = ("close_think", 0.2, [5])
    flow = ("flow", 0.15, [5, 9, 10])
    broken = ("broken_calls", -0.15, [3, 4])
    # group 1: every rollout closes its think: no credit for it anywhere
    # group 2: two of four give the full flow, one a broken call
    parts = [
        [close],
        [close],
        [close],
        [close],
        [close, flow],
        [close, flow, broken],
        [close],
        [],
    ]
    scales = [2.0] * 8
    credits, shares = anchor_advantages(parts, scales, 4, fractions=[1.0] * 8)
    assert all(v == pytest.approx(0.0) for c in credits[:4] for v in c.values())
    assert shares[:4] == pytest.approx([0.0] * 4)
    # the group's mean close part is 0.15, flow 0.075, broken -0.0375
    assert credits[4][9] == pytest.approx(2.0 * (0.15 - 0.075) / 3)
    assert credits[5][3] == pytest.approx(2.0 * (-0.15 + 0.0375) / 2)
    assert credits[7] == {}  # nothing earned: no token to credit, its share carries the miss
    totals = [sum(v for _, v, _ in p) for p in parts]
    means = {"close_think": 0.15, "flow": 0.075, "broken_calls": -0.0375}
    for i in range(4, 8):
        assert shares[i] == pytest.approx(2.0 * (totals[i] - sum(totals[4:]) / 4))
        # the tokens hold the parts the rollout earned; the parts it missed are in its share only
        missed = sum(-2.0 * m for name, m in means.items() if name not in {p[0] for p in parts[i]})
        assert sum(credits[i].values()) + missed == pytest.approx(shares[i])


def test_anchor_fractions_say_how_much_of_the_anchor_reached_the_shaped_reward() -> None:
    from paravt.rewards import anchor_fractions

    config = AdvantageConfig()  # scaling 10, bias -0.2, clip 20: a reward above 2.2 is clipped
    f = anchor_fractions([1.0, 2.0, 2.5, 1.0, 3.0], [0.5, 0.5, 0.5, 0.0, -0.5], config)
    assert f[0] == pytest.approx(1.0)  # 8 -> 13: inside the clip
    assert f[1] == pytest.approx((20 - 18) / 5)  # 18 -> 23, clipped at 20: two of its five units
    assert f[2] == pytest.approx(0.0)  # 23 alone is at the clip already
    assert f[3] == 1.0  # no anchor
    assert f[4] == pytest.approx(0.0)  # 28 -> 23: a charge that the clip hides
    with pytest.raises(ValueError, match="anchor totals"):
        anchor_fractions([1.0], [0.1, 0.2])


# A group as the released shaping sees it (scaling 10, bias -0.2, clip 20): two right answers
# with a call (reward 2.7: at the clip with or without their anchor parts), a right answer without
# a call (2.0, carried to the clip by its parts) and a wrong one without a call (1.0); beside it a
# group inside the clip. Anchor parts: the think's close and flow for every rollout that answers,
# the call's tags for the callers.
CLOSE, FLOW, CALL = ("close_think", 0.2, [1]), ("flow", 0.15, [2, 3]), ("tool_calls", 0.15, [5])
CLIP_REWARDS = [2.7, 2.7, 2.0, 1.0, 0.5, 1.5, 0.2, 1.1]
CLIP_PARTS = [
    [CLOSE, FLOW, CALL],
    [CLOSE, FLOW, CALL],
    [CLOSE, FLOW],
    [CLOSE, FLOW],
    [CLOSE, FLOW, CALL],
    [CLOSE, FLOW],
    [CLOSE],
    [CLOSE, FLOW, CALL],
]


@pytest.mark.parametrize("batch_norm", [True, False])
def test_token_anchoring_at_the_clip_leaves_every_token_the_rewards_own_advantage(
    batch_norm: bool,
) -> None:
    """Where shaped rewards reach the clip, the sequence advantage minus the anchor's share (what
    every token of a rollout carries) is exactly the advantage the reward alone gets at the
    batch's statistics, and a rollout that scored below its group is not pushed up there. Counting
    the clipped rollouts' parts at full value (the form before `anchor_fractions`) paid the wrong
    answer beside them for the anchor they never held: its plain tokens went up."""
    from paravt.rewards import advantage_scales, anchor_advantages, anchor_fractions

    config = AdvantageConfig(batch_norm=batch_norm)
    anchor = [sum(v for _, v, _ in p) for p in CLIP_PARTS]
    totals = [r + t for r, t in zip(CLIP_REWARDS, anchor)]
    advantages = group_advantages(totals, 4, config=config)
    scales = advantage_scales(totals, 4, config=config, at_clip="group")
    fractions = anchor_fractions(CLIP_REWARDS, anchor, config)
    assert fractions[:3] == pytest.approx([0.0, 0.0, 2 / 3.5])  # the clip binds in group 1 only
    credits, shares = anchor_advantages(CLIP_PARTS, scales, 4, fractions=fractions)
    base = [a - s for a, s in zip(advantages, shares)]
    shaped = shape_rewards(CLIP_REWARDS, config)
    for g in (0, 4):
        mean = sum(shaped[g : g + 4]) / 4
        for i in range(g, g + 4):
            own = scales[i] / config.reward_scaling * (shaped[i] - mean)
            assert base[i] == pytest.approx(own, abs=1e-9)
            # the tokens' credits add up to the share (the parts a rollout missed stay in it)
            missed = shares[i] - sum(credits[i].values())
            assert missed <= 1e-9
    assert base[3] < 0  # the wrong answer: below its group on every token
    assert all(c == pytest.approx(0.0) for i in (0, 1) for c in credits[i].values())

    # the form before: fractions of 1 (and the clipped rollouts at rate 0)
    old_scales = advantage_scales(totals, 4, config=config)
    _, old_shares = anchor_advantages(CLIP_PARTS, old_scales, 4, fractions=[1.0] * 8)
    old_base = [a - s for a, s in zip(advantages, old_shares)]
    assert old_base[3] > base[3] + 0.1  # the wrong answer was pushed up on every token
    assert old_base[4:] == pytest.approx(base[4:])  # inside the clip nothing changes


def test_token_parts_sum_to_the_token_vector_and_the_weighted_anchor() -> None:
    from paravt.core import parse_response
    from paravt.rewards import anchor_token_parts, anchor_token_rewards

    text = "<think>I look at the whole clip.</think><answer>B</answer>"
    parsed = parse_response(text)
    offsets = [(i, i + 1) for i in range(len(text))]
    parts = anchor_token_parts(parsed, offsets, lambda_anchor=0.5)
    vector = anchor_token_rewards(parsed, offsets, lambda_anchor=0.5)
    assert sum(p.value for p in parts) == pytest.approx(0.35) == pytest.approx(sum(vector))
    assert [p.name for p in anchor_token_parts(parsed, [], lambda_anchor=0.5)] == [
        "close_think",
        "flow",
    ]
