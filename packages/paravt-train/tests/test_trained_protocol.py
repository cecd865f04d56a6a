"""The agent protocol a recipe trains with, as written beside the weights."""

from __future__ import annotations

from pathlib import Path

from paravt.core.agent_protocol import AgentProtocol
from paravt.train.protocol import save_trained_protocol, trained_protocol
from paravt.train.recipe import load_recipe
from paravt.train.rl.rollouts import agent_config


def test_an_rl_recipe_records_its_frames_budgets_modes_and_limits(tmp_path: Path) -> None:
    recipe = load_recipe(
        "tiny_paragrpo",
        [
            "model.path=m",
            "output_dir=o",
            "rollout.prompt_mode=agentic_minimal",
            "rollout.max_new_tokens=80",
            "rollout.subagent_max_new_tokens=16",
            "rollout.max_turns=3",
            "rollout.max_parallel=5",
            "video.overview_frames=4",
            "video.max_crop_frames=4",
            "rollout.max_context_tokens=496",
            "rollout.max_episode_tokens=300",
        ],
    )
    protocol = trained_protocol(recipe)
    assert protocol.name == "paravt" and protocol.prompt_mode == "agentic_minimal"
    assert protocol.overview.num_frames == 4 and protocol.crop.max_frames == 4
    assert (protocol.overview.max_pixels, protocol.crop.max_pixels) == (4096, 4096)
    assert protocol.assistant_prefix == "<think>\n"
    assert (protocol.max_new_tokens, protocol.subagent_max_new_tokens) == (80, 16)
    assert (protocol.max_turns, protocol.max_parallel) == (3, 5)
    config = protocol.agent_config()
    assert config.max_turns == 3 and config.max_num_frames == 4 and config.think_prefix
    # the context window is the environment's, so evaluation gets it; the episode budget is a
    # training limit (the rollouts' agent config has both)
    assert protocol.max_context_tokens == 496 and config.max_context_tokens == 496
    rollouts = agent_config(recipe.rollout, recipe.video.max_crop_frames, seed=0)
    assert (rollouts.max_context_tokens, rollouts.max_episode_tokens) == (496, 300)

    final = tmp_path / "final"
    save_trained_protocol(final, recipe)  # no checkpoint there: nothing written
    assert not final.exists()
    final.mkdir()
    save_trained_protocol(final, recipe)
    assert AgentProtocol.load(final) == protocol


def test_a_recipe_without_the_think_prefix_records_none() -> None:
    recipe = load_recipe("tiny_vanilla_grpo", ["model.path=m", "output_dir=o"])
    assert trained_protocol(recipe).assistant_prefix == ""
    sft = load_recipe("tiny_sft", ["model.path=m", "output_dir=o", "video.overview_frames=8"])
    assert trained_protocol(sft).overview.num_frames == 8
