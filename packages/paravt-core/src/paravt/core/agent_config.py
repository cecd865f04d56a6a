"""How one agent run samples and how far it may go: `SamplingParams` and `AgentConfig`.

Plain settings below both the runtime (which runs them) and the agent protocol (which builds them
from a released or recorded protocol), so neither has to import the other for them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Dispatch = Literal["parallel", "sequential"]
Schedule = Literal["async", "lockstep"]
ToolResponseMode = Literal["subagent", "frames"]
CutTurnCalls = Literal["run", "skip"]


class SamplingParams(BaseModel):
    """How an engine samples. `temperature == 0` means greedy."""

    model_config = ConfigDict(extra="forbid")

    max_new_tokens: int = Field(2048, ge=1, description="Tokens generated per turn at most.")
    temperature: float = Field(0.0, ge=0.0, description="0 is greedy; RL rollouts use 0.7.")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus sampling mass.")
    top_k: int = Field(0, ge=0, description="Top-k sampling; 0 disables it.")
    seed: int | None = Field(None, description="Seed for reproducible sampling, when supported.")
    batch_invariant: bool = Field(
        False,
        description="With a seed: sample each trajectory from (seed, its `sample_key`, its "
        "position) alone, so its tokens do not depend on which requests share its batch, in what "
        "order (the in-process engine; the runtime sets the keys). False: one seed per batch, "
        "whose draws each row gets depend on the batch (the draws recorded before this option).",
    )


class EpisodeSettings(BaseModel):
    """How an episode runs and how far it may go: turns, calls per turn, token budgets, dispatch,
    what a call returns, the think prefix and the schedule. Declared once, here: `AgentConfig`
    extends it, and paravt-train's recipe section `rollout` does too (its values reach the
    runtime as they are)."""

    model_config = ConfigDict(extra="forbid")

    max_turns: int = Field(3, ge=1, description="Main-agent generations at most; the last answers.")
    max_parallel: int = Field(5, ge=1, description="crop_video calls executed per turn at most.")
    max_episode_tokens: int | None = Field(
        None,
        ge=1,
        description="Main-context tokens after the first prompt at most: every generated token "
        "plus every appended tool response and note (verl's multi-turn `response_length`). A "
        "turn generates at most what is left; tool responses that do not fit end the episode "
        "without an answer (`Episode.budget_exhausted`). None: only the per-turn limit.",
    )
    max_context_tokens: int | None = Field(
        None,
        ge=1,
        description="Main-context tokens at most, the first prompt included (a server's context "
        "length: vLLM's max_model_len, SGLang's context_length): a denser overview leaves less "
        "room for tool responses and the answer; the same rules as max_episode_tokens after that. "
        "A first prompt that does not fit is an error. None: no limit.",
    )
    dispatch: Dispatch = Field(
        "parallel", description="'parallel': all calls of a turn; 'sequential': one call per turn."
    )
    tool_response: ToolResponseMode = Field(
        "subagent",
        description="'subagent': a weight-sharing sub-agent summarises each window's frames; "
        "'frames': the frames return into the main context.",
    )
    cut_turn_calls: CutTurnCalls = Field(
        "run",
        description="The calls of a turn that its token limit cut before it ended (finish "
        "reason 'length'). 'run' (the released driver's way): its valid calls run. 'skip': none "
        "runs, each answered 'not executed: the turn was cut by its token limit', so a turn "
        "brings evidence only when it ended by itself, and a call started where the limit cuts "
        "it costs the calls before it (under credit for evidence, their tool reward). Ours, for "
        "training: with 'run', a third call the 80-token limit cut rose with the right answers "
        "of the two calls before it (issue 44).",
    )
    think_prefix: bool = Field(True, description="Start every main response with '<think>\\n'.")
    schedule: Schedule = Field(
        "async",
        description="'async': every episode moves on its own (generate -> its calls -> its "
        "sub-agents -> next turn); 'lockstep': all episodes advance turn by turn together.",
    )


class AgentConfig(EpisodeSettings):
    """The knobs of one agent run (reference values as defaults)."""

    max_num_frames: int = Field(16, ge=1, description="Upper bound for a call's num_frames.")
    tool_timeout_s: float = Field(120.0, gt=0, description="Time limit of one turn's tool calls.")
    max_requests_in_flight: int = Field(
        256,
        ge=1,
        description="Generation requests open at once (server engine) or trajectories batched "
        "together at most (in-process engine).",
    )
    sampling: SamplingParams = Field(default_factory=SamplingParams)
    subagent_sampling: SamplingParams = Field(
        default_factory=lambda: SamplingParams(max_new_tokens=256),
        description="Sampling of the sub-agents (shorter: they write a summary).",
    )
