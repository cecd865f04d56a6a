"""Producing rollouts: the agent configuration of a run, the main prompt over a prompt's overview,
and one step's episodes through the agent runtime."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from paravt.core import (
    AgentConfig,
    AgentTask,
    Episode,
    EpisodeSettings,
    Message,
    SamplingParams,
    TextPart,
    build_main_prompt,
    render_frames,
    run_episodes_sync,
)
from paravt.train.recipe import RLRecipe, RolloutSpec

log = logging.getLogger("paravt.train")


def agent_config(r: RolloutSpec, max_crop_frames: int, *, seed: int | None) -> AgentConfig:
    """The agent runtime's settings of a rollout section (`max_crop_frames`: the video
    section's), sampling with `seed` (the sub-agents with `seed + 1`)."""
    return AgentConfig(
        # the section's EpisodeSettings fields, as declared once in paravt-core
        **r.model_dump(include=set(EpisodeSettings.model_fields)),
        max_num_frames=max_crop_frames,
        sampling=SamplingParams(
            max_new_tokens=r.max_new_tokens,
            temperature=r.temperature,
            top_p=r.top_p,
            seed=seed,
            batch_invariant=r.batch_invariant_sampling,
        ),
        subagent_sampling=SamplingParams(
            max_new_tokens=r.subagent_max_new_tokens,
            temperature=r.temperature,
            top_p=r.top_p,
            seed=None if seed is None else seed + 1,
            batch_invariant=r.batch_invariant_sampling,
        ),
    )


def prompt_messages(
    example: Any, overview: Sequence[Any], duration_s: float, r: RolloutSpec
) -> list[Message]:
    """The main agent's first prompt: the row's system prompt (or ours), the overview frames with
    their timestamps where the row's `<video>` placeholder was, and the question."""
    if example.system is None:
        return build_main_prompt(
            example.question,
            overview,
            mode=r.prompt_mode,
            duration_s=duration_s,
            max_turns=r.max_turns,
            max_parallel=r.max_parallel,
        )
    intro = TextPart(
        f"The video is {duration_s:.1f} seconds long. Overview ({len(overview)} frames):"
    )
    return [
        Message("system", example.system),
        Message(
            "user", [intro, *render_frames(overview), TextPart("Question: " + example.question)]
        ),
    ]


@dataclass
class Rollouts:
    """One step's episodes with what they were scored against."""

    episodes: list[Episode]
    examples: list[Any]  # per episode
    budgets: list[int]  # overview K per episode
    rewards: list[Any] = field(default_factory=list)  # RewardBreakdown per episode
    advantages: list[float] = field(default_factory=list)
    # the exchange rate of each episode's reward into its advantage
    # (`paravt.rewards.advantage_scales`; token-level anchoring's unit)
    anchor_scales: list[float] = field(default_factory=list)
    # per episode, how much of its anchor total reached its shaped reward (the clip;
    # `paravt.rewards.anchor_fractions`); all 1 without anchor parts on tokens
    anchor_fractions: list[float] = field(default_factory=list)
    # per episode, whether the shaped reward its advantage saw sits at advantage.reward_clip
    # (what it earned above the clip moved nothing)
    at_clip: list[bool] = field(default_factory=list)
    # per episode, what its advantage was computed from: the reward's total plus, with anchor
    # parts on tokens, its anchor total (the charges of a structure that does not parse too)
    advantage_totals: list[float] = field(default_factory=list)


def rollout(
    examples: Sequence[Any],
    engine: Any,
    frames: Any,
    gate: Any,
    recipe: RLRecipe,
    *,
    epoch: int,
    seed: int | None,
) -> Rollouts:
    """`group_size` agent episodes per example (consecutive), with gated overview budgets."""
    r = recipe.rollout
    tasks, per_episode, budgets = rollout_tasks(examples, frames, gate, r, epoch=epoch)
    config = agent_config(r, recipe.video.max_crop_frames, seed=seed)
    episodes = run_episodes_sync(tasks, engine, config)
    return Rollouts(episodes, per_episode, budgets)


def rollout_tasks(
    examples: Sequence[Any], frames: Any, gate: Any, r: RolloutSpec, *, epoch: int
) -> tuple[list[AgentTask], list[Any], list[int]]:
    """The agent tasks of `rollout` (overviews decoded; `r.group_size` episodes per example),
    each episode's example and budget."""
    tasks: list[AgentTask] = []
    per_episode: list[Any] = []
    budgets: list[int] = []
    for ex in examples:
        k = gate.budget(ex.key, epoch)
        overview, duration_s = frames.overview(ex.video, k)
        messages = prompt_messages(ex, overview, duration_s, r)
        for j in range(r.group_size):
            tasks.append(
                AgentTask(f"{ex.key}#{j}", messages, frames.toolbox(ex.video), ex.question)
            )
            per_episode.append(ex)
            budgets.append(k)
    return tasks, per_episode, budgets


class PreparedStep(NamedTuple):
    """One step's rollouts before generation (asynchronous training prepares them ahead)."""

    epoch: int
    seed: int
    tasks: list[AgentTask]
    per_episode: list[Any]  # each episode's example
    budgets: list[int]  # each episode's overview K
