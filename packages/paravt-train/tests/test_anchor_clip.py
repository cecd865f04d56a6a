"""Token-level anchor credit where shaped rewards reach the clip (no model: the scripted engine).

With the reference's shaping (scaling 10, bias -0.2, clip 20) every reward above 2.2 reads as
2.2, and a right answer with a call sits there. The trainer moves each episode's anchor parts onto
their tokens and takes the anchor's share off every other token; before `anchor_fractions`, the
parts of episodes at the clip counted in full in their group's means, so the share taken off a
wrong answer beside them was negative: its every token went up. In the `prior_kept` run that
was the arms that anchor at token level dropping their calls.
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

from .rl_helpers import CALL, CharEngine, Example, prefixed_episodes

THINK = "<think>The overview shows the square only briefly.</think>"


def episodes(plan: list[tuple[bool, str]]) -> tuple[list[Episode], CharEngine]:
    """One episode per (calls, answer): a call turn then the answer turn, or the answer at once."""
    calls = {f"e{i}": c for i, (c, _) in enumerate(plan)}
    answers = {f"e{i}": a for i, (_, a) in enumerate(plan)}

    def respond(traj: Trajectory) -> str:
        if traj.role == "subagent":
            return "<answer>A red square at 6 s.</answer>"
        key = traj.messages[0].parts[0].text  # type: ignore[union-attr]
        turns = sum(1 for m in traj.messages if m.role == "assistant")
        final = f"{THINK}<answer>{answers[key]}</answer>"
        return f"{THINK}{CALL}" if calls[key] and turns == 0 else final

    engine = CharEngine(respond)
    tasks = [
        AgentTask(k, [Message("user", k)], StaticToolbox(), "What colour is the square?")
        for k in calls
    ]
    return run_episodes_sync(tasks, engine, AgentConfig(think_prefix=False)), engine


def token_advantages(recipe: Any, eps: list[Episode], engine: CharEngine) -> list[list[float]]:
    ro = Rollouts(eps, [Example(f"e{i}", "red") for i in range(len(eps))], [4] * len(eps))
    reward_config = build_reward_config(recipe)
    score_rollouts(ro, reward_config, recipe)
    seqs = training_sequences(
        ro,
        engine,
        reward_config,
        recipe.advantage,
        group_size=recipe.rollout.group_size,
        think_prefix=False,
        include_subagents=False,
    )
    assert sum(ro.at_clip) == 4  # the right answers with a call
    return [[a for a, m in zip(s.advantages or [], s.mask) if m] for s in seqs]


@pytest.mark.parametrize("token_level", [True, False])
def test_a_wrong_answer_beside_right_answers_at_the_clip_is_never_pushed_up(
    token_level: bool,
) -> None:
    """Four right answers with a call (at the clip), two right without one, two wrong: the wrong
    answers' tokens all carry a negative advantage and the plain tokens follow the rewards, under
    token-level anchoring and under the call parts the tiny recipes put on tokens. With the parts
    of the clipped episodes counted in full (the form before) the wrong answers were pushed up,
    and under token-level anchoring a right answer without a call out-earned one with a call."""
    recipe = load_recipe(
        "tiny_paragrpo",
        [
            "rollout.think_prefix=false",
            "rollout.group_size=8",
            f"advantage.token_level_anchoring={str(token_level).lower()}",
            "reward.overrides.anchor_tool_calls=true",
        ],
        stage="rl",
    )
    plan = [(True, "red")] * 4 + [(False, "red")] * 2 + [(False, "blue")] * 2
    eps, engine = episodes(plan)
    now = token_advantages(recipe, eps, engine)
    for wrong in now[6:]:
        assert max(wrong) < 0, wrong
    # the plain tokens (the median token) follow the rewards: 2.8 (a call) > 1.8 > 0.8 (wrong)
    median = [sorted(a)[len(a) // 2] for a in now]
    assert median[0] > median[4] > 0 > median[6], median

    # the form before: every anchor part at full value, an episode at the clip at rate 0
    real_scales = scoring.advantage_scales
    with (
        mock.patch.object(scoring, "anchor_fractions", lambda r, t, c: [1.0] * len(r)),
        mock.patch.object(
            scoring,
            "advantage_scales",
            lambda *a, **kw: real_scales(*a, **{**kw, "at_clip": "zero"}),
        ),
    ):
        before = token_advantages(recipe, eps, engine)
    old = [sorted(a)[len(a) // 2] for a in before]
    assert old[6] > median[6] + 0.05, (old, median)  # the wrong answers went up
    if token_level:  # and a right answer without a call above the ones with a call
        assert old[4] > old[0], old


@pytest.mark.parametrize("token_level", [True, False])
def test_the_clip_watch_warns_once_with_the_level_and_the_fix(
    caplog: pytest.LogCaptureFixture, token_level: bool
) -> None:
    """`advantage/at_clip_frac` under a quarter says nothing; the first step at or above it warns
    once, naming the share, the reward level the clip flattens and the setting that lifts it."""
    from paravt.train.recipe import AdvantageSpec
    from paravt.train.rl import ClipWatch

    watch = ClipWatch(AdvantageSpec(token_level_anchoring=token_level))
    caplog.set_level("WARNING", logger="paravt.train")
    fired = [
        step
        for step, share in enumerate([0.0, 0.2, 0.5, 0.9, 0.3], start=1)
        if watch.observe(step, {"advantage/at_clip_frac": share})
    ]
    assert fired == [3]
    (message,) = [r.getMessage() for r in caplog.records]
    assert "step 3: 50%" in message and "above 2.20" in message
    assert "advantage.reward_clip=40" in message
    assert ("token-level credit" in message) == token_level
    assert not ClipWatch(AdvantageSpec(reward_clip=40)).observe(1, {})  # metric absent: silent


@pytest.mark.parametrize("arm", ["para_grpo", "para_grpo_sequence", "anchoring_only"])
def test_no_episode_of_the_prior_kept_arms_reaches_the_tasks_clip(arm: str) -> None:
    """The third registration clips every arm's shaped rewards at +-40 so that R_tool and the
    anchor keep moving the advantage of a right answer with calls: the best episode the task's
    arms can produce (a well-formed call after a think, then a think and the right answer)
    stays below it, while under the released clip (20) it sits at the clip."""
    from paravt.train.miniature import ARMS, TASKS

    task = TASKS["prior_kept"]
    overrides = [*ARMS[arm].overrides(task), *task.rollout, "rollout.group_size=4"]
    eps, _ = prefixed_episodes(["ok"] * 3 + ["wrong"])
    results = {}
    for extra in ([], ["advantage.reward_clip=20"]):
        recipe = load_recipe("tiny_paragrpo", [*overrides, *extra], stage="rl")
        assert recipe.rollout.think_prefix
        ro = Rollouts(eps, [Example(f"e{i}", "red") for i in range(len(eps))], [4] * len(eps))
        score_rollouts(ro, build_reward_config(recipe), recipe)
        assert ro.rewards[0].accuracy == 1 and ro.rewards[0].tool > 0
        results[recipe.advantage.reward_clip] = ro.at_clip[:3]
    assert results == {40.0: [False] * 3, 20.0: [True] * 3}
