"""The charges on a structure that does not parse reach the token that broke it.

Our presets pay R_fmt only for a structure that parses (`format_credit="parses"`), and the tiny
recipes put the parser's format issues on their tokens (`anchor_format_issues`) with no positive
outcome credit on a charged token (`no_credit_on_issues`). Before, an episode whose structure did
not parse lost its charges with its credit, so the token that broke the format kept its outcome
credit. In run 11 of issue 44 a policy (fp32, seed 4) learnt to answer after its calls with
`<think>\\n<answer>blue</answer>`: the think of the prefix never closed. Beside wrong answers that
episode's reward (a right answer with calls, no format) beats its group's mean, and its `<answer>`,
generated where `</think>` was due, was pushed up.
"""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest

from paravt.train.recipe import load_recipe
from paravt.train.rl import (
    Rollouts,
    build_reward_config,
    score_rollouts,
    scoring,
    training_sequences,
)

from .rl_helpers import Example, prefixed_episodes


def answer_token_advantage() -> tuple[float, float, float]:
    """(sequence advantage, advantage on the `<answer>` that skipped the think, median token
    advantage) of the 'skip' episode in a group of two 'ok', one 'skip' and five 'wrong'."""
    recipe = load_recipe("tiny_paragrpo", ["rollout.group_size=8"], stage="rl")
    eps, engine = prefixed_episodes(["ok", "ok", "skip"] + ["wrong"] * 5)
    ro = Rollouts(eps, [Example(f"e{i}", "red") for i in range(len(eps))], [4] * len(eps))
    reward_config = build_reward_config(recipe)
    score_rollouts(ro, reward_config, recipe)
    assert "format_not_parsed" in ro.rewards[2].flags
    assert "format_not_parsed" not in ro.rewards[0].flags
    seqs = training_sequences(
        ro,
        engine,
        reward_config,
        recipe.advantage,
        group_size=8,
        think_prefix=True,
        include_subagents=False,
    )
    skip = seqs[2]
    text = engine.decode(skip.token_ids)
    at = text.rindex("<answer>red")  # the answer turn's first generated token
    assert skip.mask[at] == 1
    trained = [a for a, m in zip(skip.advantages or [], skip.mask) if m]
    return ro.advantages[2], (skip.advantages or [])[at], sorted(trained)[len(trained) // 2]


def test_the_answer_that_skipped_the_think_is_charged_though_its_episode_beat_its_group() -> None:
    sequence, on_answer, median = answer_token_advantage()
    assert sequence > 0 and median > 0  # a right answer with calls beats five wrong ones
    assert on_answer < 0  # but the token that broke the format is not pushed up

    # the form before: an episode whose format earned nothing lost its charges too
    real = scoring._anchor_parts

    def dropped(*args: Any, charges_only: bool) -> list[Any]:
        return [] if charges_only else real(*args, charges_only=False)

    with mock.patch.object(scoring, "_anchor_parts", dropped):
        sequence_before, before, _ = answer_token_advantage()
    assert sequence_before > 0 and before == pytest.approx(sequence_before)  # pushed up too
