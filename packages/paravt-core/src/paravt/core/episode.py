"""What one agent episode is made of: the engine and toolbox interfaces, and the records.

`Engine` and `Toolbox` are the two interfaces the runtime (`paravt.core.runtime`) talks to;
`Encoded`, `Generated` and `Trajectory` are what passes through an engine (token ids, log-probs
and a loss mask that is 1 exactly on generated tokens); `CallRecord`, `TurnRecord` and `Episode`
are what the runtime records, and what rewards and training consume unchanged; `AgentTask` is one
sample going in. Kept apart from the loop so that the data can be read without the scheduling.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from paravt.core.agent_config import SamplingParams
from paravt.core.parser import ParsedResponse
from paravt.core.protocol import CropVideoArgs, Message, ToolOutput

FinishReason = Literal["stop", "length"]


# --------------------------------------------------------------------------------------------------
# What engines take and return


@dataclass
class Encoded:
    """A tokenized piece of prompt: token ids plus the engine's processed media for its images."""

    token_ids: list[int]
    media: list[Any] = field(default_factory=list)


@dataclass
class Generated:
    """One generation as sampled: text, token ids and their log-probabilities."""

    text: str
    token_ids: list[int]
    logprobs: list[float] | None = None
    finish_reason: FinishReason = "stop"
    # tokens generated as the server counted them (`usage.completion_tokens`), for text engines
    # that get no token ids back; None: count `token_ids`
    usage_tokens: int | None = None

    @property
    def num_tokens(self) -> int:
        return (
            len(self.token_ids)
            if self.token_ids or self.usage_tokens is None
            else self.usage_tokens
        )


@dataclass
class Trajectory:
    """One conversation as token ids, with a loss mask that is 1 exactly on generated tokens.

    `messages` mirrors the same conversation as chat messages (for text-only engines and for
    people); `media` holds the engine's processed images in prompt order.
    """

    role: Literal["main", "subagent"]
    messages: list[Message] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    media: list[Any] = field(default_factory=list)
    turn: int | None = None  # sub-agents: the main turn that spawned them
    call_index: int | None = None  # sub-agents: the call they answered
    assistant_prefix: str = ""  # text the engine appended after the generation prompt
    # a stable key of this request, set by the runtime from the episode's place in its
    # `run_episodes` call, the role, and (sub-agents) the main turn and call; with
    # `SamplingParams.batch_invariant` an engine draws this trajectory's tokens from (seed, key,
    # position) alone, whatever else shares its batch. None: no key (the batch's seed is used)
    sample_key: int | None = None

    def add_prompt(self, encoded: Encoded, messages: Sequence[Message]) -> None:
        self.messages.extend(messages)
        self.token_ids.extend(encoded.token_ids)
        self.loss_mask.extend([0] * len(encoded.token_ids))
        self.logprobs.extend([0.0] * len(encoded.token_ids))
        self.media.extend(encoded.media)

    def add_generated(self, out: Generated) -> None:
        self.messages.append(Message("assistant", self.assistant_prefix + out.text))
        self.token_ids.extend(out.token_ids)
        self.loss_mask.extend([1] * len(out.token_ids))
        lps = out.logprobs if out.logprobs is not None else [0.0] * len(out.token_ids)
        self.logprobs.extend(lps)

    @property
    def num_generated(self) -> int:
        return sum(self.loss_mask)


@runtime_checkable
class Engine(Protocol):
    """Batched generation over trajectories; tokenization through the model's own chat template."""

    def encode_prompt(self, messages: Sequence[Message], *, assistant_prefix: str = "") -> Encoded:
        """A conversation's first prompt, ending with the generation prompt and `assistant_prefix`."""
        ...

    def encode_continuation(
        self, messages: Sequence[Message], *, previous: Generated, assistant_prefix: str = ""
    ) -> Encoded:
        """What follows a generation: closes the assistant turn if `previous` did not, renders
        `messages` (tool responses, notes), then the generation prompt and `assistant_prefix`."""
        ...

    async def generate(
        self, trajectories: Sequence[Trajectory], sampling: SamplingParams
    ) -> list[Generated]:
        """Continue every trajectory once (one batch)."""
        ...


@runtime_checkable
class Toolbox(Protocol):
    """The tools of one sample. It owns the sample's video; the model never names a file."""

    async def execute(self, calls: Sequence[CropVideoArgs]) -> list[ToolOutput]:
        """Run every validated call of one turn (together), returning one output per call, in order.
        A failing call returns `ToolOutput.failure(...)`; it must not fail the others."""
        ...


# --------------------------------------------------------------------------------------------------
# What the runtime records


@dataclass
class CallRecord:
    index: int  # position among the turn's call attempts
    name: str | None
    arguments: dict[str, Any]
    executed: bool
    window_s: tuple[float, float] | None = None
    num_frames: int = 0
    error: str | None = None
    summary: str | None = None
    note: str = ""
    # every change made to the request (argument validation's and the tool's), one sentence each;
    # each is also stated in the tool response the model reads
    clamps: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data (windows as lists)."""
        return {
            "index": self.index,
            "name": self.name,
            "arguments": self.arguments,
            "executed": self.executed,
            "window_s": list(self.window_s) if self.window_s else None,
            "num_frames": self.num_frames,
            "error": self.error,
            "note": self.note,
            "clamps": list(self.clamps),
            "summary": self.summary,
        }


@dataclass
class TurnRecord:
    turn: int
    response: str
    parsed: ParsedResponse
    finish_reason: FinishReason
    num_tokens: int
    calls: list[CallRecord] = field(default_factory=list)
    generate_s: float = 0.0
    tools_s: float = 0.0
    subagent_s: float = 0.0

    @property
    def num_calls(self) -> int:
        return len(self.calls)

    @property
    def num_executed(self) -> int:
        return sum(c.executed for c in self.calls)

    @property
    def errors(self) -> list[str]:
        return [c.error for c in self.calls if c.error]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data for traces and people: think, answer, issues, calls and timings."""
        return {
            "turn": self.turn,
            "response": self.response,
            "think": self.parsed.think,
            "answer": self.parsed.answer,
            "finish_reason": self.finish_reason,
            "num_tokens": self.num_tokens,
            "issues": [{"kind": i.kind.value, "message": i.message} for i in self.parsed.issues],
            "calls": [c.to_dict() for c in self.calls],
            "timings_s": {
                "generate": round(self.generate_s, 4),
                "tools": round(self.tools_s, 4),
                "subagents": round(self.subagent_s, 4),
            },
        }


@dataclass
class Episode:
    """Everything about one agent run; training consumes it unchanged."""

    key: str
    main: Trajectory
    subagents: list[Trajectory] = field(default_factory=list)
    turns: list[TurnRecord] = field(default_factory=list)
    forced_answer: bool = False  # the last turn was told to answer
    # `AgentConfig.max_episode_tokens` ran out before the answer: the turn's tool responses did not
    # fit in the main context, so the episode ended after its last generation
    budget_exhausted: bool = False
    total_s: float = 0.0

    @property
    def final(self) -> ParsedResponse:
        return self.turns[-1].parsed

    @property
    def answer(self) -> str | None:
        return self.final.answer

    @property
    def truncated(self) -> bool:
        """The episode was cut by a token limit: its last generation hit the turn's limit (what
        was left of the episode budget), or the episode budget ran out before the next turn."""
        return self.budget_exhausted or (
            bool(self.turns) and self.turns[-1].finish_reason == "length"
        )

    @property
    def num_tool_calls(self) -> int:
        """Valid calls that were executed, over all turns."""
        return sum(t.num_executed for t in self.turns)

    @property
    def num_call_attempts(self) -> int:
        return sum(t.num_calls for t in self.turns)

    @property
    def num_tool_errors(self) -> int:
        return sum(len(t.errors) for t in self.turns)

    @property
    def calls_per_turn(self) -> list[int]:
        return [t.num_calls for t in self.turns]

    @property
    def tool_responses_ok(self) -> int:
        return sum(1 for t in self.turns for c in t.calls if c.executed and c.error is None)


@dataclass
class AgentTask:
    """One sample: its first prompt (see `prompts.build_main_prompt`), its toolbox, its question.

    `answer_kind` (`mcq`, `grounding`, `open`) picks the protocol's final-answer note."""

    key: str
    messages: list[Message]
    toolbox: Toolbox
    question: str
    answer_kind: str = "mcq"
