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

from paravt.core import AgentConfig, AgentTask, Episode, Message, run_episodes_sync
from paravt.core.runtime import Trajectory
from paravt.core.testing import StaticToolbox
from paravt.train.recipe import load_recipe
from paravt.train.rl import (
    Rollouts,
    build_reward_config,
    score_rollouts,
    scoring,
    training_sequences,
)

from .rl_helpers import Example
from .test_anchor_clip import CALL, CharEngine

LOOK = "The overview is too coarse here.</think>"
SEEN = "The crops show the square clearly.</think>"
GUESS = "The overview hints at a colour.</think>"


def episodes(plan: list[str]) -> tuple[list[Episode], CharEngine]:
    """One episode per kind: 'ok' (a call, then a think and the right answer), 'skip' (a call,
    then the right answer with the prefix's think never closed), 'wrong' (a wrong answer at once).
    Every main turn starts after the think prefix."""
    kinds = {f"e{i}": k for i, k in enumerate(plan)}

    def respond(traj: Trajectory) -> str:
        if traj.role == "subagent":
            return "<answer>A red square at 6 s.</answer>"
        kind = kinds[traj.messages[0].parts[0].text]  # type: ignore[union-attr]
        turns = sum(1 for m in traj.messages if m.role == "assistant")
        if kind == "wrong":
            return f"{GUESS}<answer>blue</answer>"
        if turns == 0:
            return f"{LOOK}{CALL}"
        return "<answer>red</answer>" if kind == "skip" else f"{SEEN}<answer>red</answer>"

    engine = CharEngine(respond)
    tasks = [
        AgentTask(k, [Message("user", k)], StaticToolbox(), "What colour is the square?")
        for k in kinds
    ]
    return run_episodes_sync(tasks, engine, AgentConfig(think_prefix=True)), engine


def answer_token_advantage(recipe_overrides: list[str]) -> tuple[float, float, float]:
    """(sequence advantage, advantage on the `<answer>` that skipped the think, median token
    advantage) of the 'skip' episode in a group of two 'ok', one 'skip' and five 'wrong'."""
    recipe = load_recipe("tiny_paragrpo", ["rollout.group_size=8", *recipe_overrides], stage="rl")
    eps, engine = episodes(["ok", "ok", "skip"] + ["wrong"] * 5)
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
    sequence, on_answer, median = answer_token_advantage([])
    assert sequence > 0 and median > 0  # a right answer with calls beats five wrong ones
    assert on_answer < 0  # but the token that broke the format is not pushed up

    # the form before: an episode whose format earned nothing lost its charges too
    def dropped(parts: list[Any], flags: list[str]) -> list[Any]:
        return [] if "format_not_parsed" in flags else parts

    with mock.patch.object(scoring, "_earned", dropped):
        sequence_before, before, _ = answer_token_advantage([])
    assert sequence_before > 0 and before == pytest.approx(sequence_before)  # pushed up too
