"""Scoring a whole agent Episode from the core runtime."""

from __future__ import annotations

import pytest

from paravt.core import AgentConfig, AgentTask, Message, run_episodes_sync
from paravt.core.runtime import Trajectory
from paravt.core.testing import ScriptedEngine, StaticToolbox
from paravt.rewards import RewardConfig, score_episode

CALL = (
    '<tool_call>{"name": "crop_video", "arguments": {"start_time": %d, "end_time": %d}}</tool_call>'
)


def run(first_turn: str, final: str, toolbox: StaticToolbox | None = None):
    def respond(traj: Trajectory) -> str:
        if traj.role == "subagent":
            return "<answer>A red square at 12 s.</answer>"
        turns = sum(1 for m in traj.messages if m.role == "assistant")
        return first_turn if turns == 0 else final

    task = AgentTask("k", [Message("user", "Which colour?")], toolbox or StaticToolbox(), "Which?")
    (episode,) = run_episodes_sync([task], ScriptedEngine(respond), AgentConfig())
    return episode


def test_an_episode_with_a_returned_tool_response_earns_the_full_tool_reward() -> None:
    ep = run("I check the clip.</think>" + CALL % (10, 20), "I saw red.</think><answer>B</answer>")
    assert ep.tool_responses_ok == 1
    r = score_episode(ep, "B", "mcq", RewardConfig.paragrpo())
    # acc 1; format 1 (think, answer, order, balanced, anchor); tool 0.3 + 0.5
    assert (r.accuracy, r.format, r.tool, r.total) == pytest.approx((1, 1, 0.8, 2.8))
    assert r.tool_responses == 1 and r.penalty == 0


def test_a_call_whose_tool_failed_earns_only_the_parseable_credit_and_a_penalty() -> None:
    box = StaticToolbox(duration_s=60, fail_starts=frozenset({10.0}))
    ep = run(
        "I check the clip.</think>" + CALL % (10, 20),
        "Still unsure.</think><answer>C</answer>",
        box,
    )
    r = score_episode(ep, "B", "mcq", RewardConfig.reference_paragrpo(gamma=0.5))
    assert (r.tool, r.penalty) == (0.1, 1.0)
    assert r.total == pytest.approx(0 + 1 + 0.1 - 0.5)
    # credit for evidence (the presets): a call whose tool failed brought none, earns no tool
    # reward and no think-before-call bonus, and is charged gamma
    r = score_episode(ep, "B", "mcq", RewardConfig.paragrpo())
    assert (r.tool, r.penalty, r.tool_responses) == (0.0, 1.0, 0)
    assert r.total == pytest.approx(0 + 1 + 0 - 0.2)


def test_an_episode_without_calls_scores_like_its_single_response() -> None:
    ep = run("I know it.</think><answer>B</answer>", "unused")
    r = score_episode(ep, "B", "mcq", RewardConfig.vanilla())
    assert (r.accuracy, r.format, r.tool, r.call_attempts) == pytest.approx((1, 0.7, 0, 0))
