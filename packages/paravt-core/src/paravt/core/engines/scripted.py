"""Scripted main-agent turns over a real engine.

A random-weight model never emits a well-formed tool call, so demos and end-to-end tests script the
main agent's chosen turns (say, the first turn calls `crop_video` twice) while every other
generation, sub-agents included, is the real model's. The scripted text is tokenized by the real
tokenizer (`encode_generation`), so token bookkeeping stays exact.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from paravt.core.protocol import Message
from paravt.core.runtime import Encoded, Generated, SamplingParams, Trajectory


class _TokenEngine(Protocol):
    def encode_prompt(
        self, messages: Sequence[Message], *, assistant_prefix: str = ""
    ) -> Encoded: ...

    def encode_continuation(
        self, messages: Sequence[Message], *, previous: Generated, assistant_prefix: str = ""
    ) -> Encoded: ...

    async def generate(
        self, trajectories: Sequence[Trajectory], sampling: SamplingParams
    ) -> list[Generated]: ...

    def encode_generation(self, text: str, *, end_turn: bool = True) -> Generated: ...


def main_turn(trajectory: Trajectory) -> int:
    """Which main-agent turn (1-based) a trajectory is about to generate."""
    return 1 + sum(1 for m in trajectory.messages if m.role == "assistant")


@dataclass
class ScriptedTurns:
    """Wraps `engine`: main-agent turn `t` listed in `scripts` returns `scripts[t]` (text after the
    assistant prefix) instead of a sample; everything else goes to `engine` in one batch."""

    engine: Any
    scripts: Mapping[int, str]
    scripted: list[tuple[int, Generated]] = field(default_factory=list)  # (turn, output) served

    def __post_init__(self) -> None:
        if not hasattr(self.engine, "encode_generation"):
            raise TypeError(
                f"{type(self.engine).__name__} cannot tokenize scripted text (no encode_generation)"
            )

    @property
    def continuous_batching(self) -> bool:
        """As the wrapped engine (the runtime sends a server engine's requests one by one)."""
        return bool(getattr(self.engine, "continuous_batching", False))

    def encode_prompt(self, messages: Sequence[Message], *, assistant_prefix: str = "") -> Encoded:
        return self.engine.encode_prompt(messages, assistant_prefix=assistant_prefix)

    def encode_continuation(
        self, messages: Sequence[Message], *, previous: Generated, assistant_prefix: str = ""
    ) -> Encoded:
        return self.engine.encode_continuation(
            messages, previous=previous, assistant_prefix=assistant_prefix
        )

    async def generate(
        self, trajectories: Sequence[Trajectory], sampling: SamplingParams
    ) -> list[Generated]:
        results: list[Generated | None] = [None] * len(trajectories)
        real: list[int] = []
        for i, traj in enumerate(trajectories):
            turn = main_turn(traj)
            if traj.role == "main" and turn in self.scripts:
                out = self.engine.encode_generation(self.scripts[turn])
                self.scripted.append((turn, out))
                results[i] = out
            else:
                real.append(i)
        if real:
            outs = await self.engine.generate([trajectories[i] for i in real], sampling)
            for i, out in zip(real, outs):
                results[i] = out
        return [r for r in results if r is not None]
