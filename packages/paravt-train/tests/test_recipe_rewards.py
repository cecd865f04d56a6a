"""Every shipped RL recipe's reward pays for evidence, not for syntax.

On a GPU the learning check's policy learnt to make nothing but invalid calls while its reward
rose: the released reward pays the tool reward for any call with a tool name. Under every recipe
we ship (and the miniature's learning setting), a right answer after an invalid call must never
score above the same answer with no call, and a call that ran must score above an invalid one.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from paravt.core import AgentConfig, AgentTask, Episode, Message, run_episodes_sync
from paravt.core.runtime import Trajectory
from paravt.core.testing import ScriptedEngine, StaticToolbox
from paravt.rewards import score_episode
from paravt.train.recipe import RLRecipe, load_recipe
from paravt.train.rl import build_reward_config

RECIPES = sorted(
    p.stem
    for p in (Path(__file__).parents[1] / "src/paravt/train/recipes").glob("*.yaml")
    if "stage: rl" in p.read_text()
)
THINK = "I check the clip first."
VALID = (
    '<tool_call>{"name": "crop_video", "arguments": {"start_time": 10, "end_time": 20}}</tool_call>'
)
INVALID = {
    "empty_window": '<tool_call>{"name": "crop_video", "arguments": {"start_time": 8.0, '
    '"end_time": 8.0}}</tool_call>',
    "unknown_tool": '<tool_call>{"name": "zoom", "arguments": {}}</tool_call>',
}


def episode(first: str, final: str) -> Episode:
    def respond(traj: Trajectory) -> str:
        if traj.role == "subagent":
            return "<answer>A red square at 12 s.</answer>"
        turns = sum(1 for m in traj.messages if m.role == "assistant")
        return first if turns == 0 else final

    task = AgentTask("k", [Message("user", "Which colour?")], StaticToolbox(), "Which?")
    (ep,) = run_episodes_sync([task], ScriptedEngine(respond), AgentConfig())
    return ep


def test_the_shipped_rl_recipes_are_all_here() -> None:
    assert {"tiny_paragrpo", "tiny_vanilla_grpo", "paragrpo_8b", "vanilla_grpo_8b"} <= set(RECIPES)


@pytest.mark.parametrize("name", RECIPES)
@pytest.mark.parametrize("call", sorted(INVALID))
def test_no_shipped_recipe_pays_for_an_invalid_call(name: str, call: str) -> None:
    recipe = load_recipe(name, stage="rl")
    assert isinstance(recipe, RLRecipe)
    config = build_reward_config(recipe)
    final = f"{THINK}</think><answer>B</answer>"
    bad = score_episode(episode(f"{THINK}</think>{INVALID[call]}", final), "B", "mcq", config)
    none = score_episode(episode(final, "unused"), "B", "mcq", config)
    good = score_episode(episode(f"{THINK}</think>{VALID}", final), "B", "mcq", config)
    assert bad.total <= none.total, (name, bad, none)
    assert good.total > bad.total, (name, good, bad)
    assert config.tool_credit == "evidence" and config.gamma > 0
