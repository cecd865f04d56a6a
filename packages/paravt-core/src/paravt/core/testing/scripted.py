"""A light stand-in for tests and examples: a scripted engine (the toolbox of fixed frames,
`StaticToolbox`, is a runtime feature of the demo: `paravt.core.toy`).

`ScriptedEngine` tokenizes one token per character (images become one placeholder token each), so
tests can check token bookkeeping exactly without a model. Real engines live in
`paravt.core.engines`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from paravt.core.protocol import ImagePart, Message
from paravt.core.runtime import Encoded, FinishReason, Generated, SamplingParams, Trajectory

IMAGE_TOKEN = 0
END_OF_TURN = "\x03"  # the scripted engine's end-of-turn token (one character)


def _render(messages: Sequence[Message]) -> tuple[str, list[Any]]:
    text, media = [], []
    for m in messages:
        text.append(f"[{m.role}]")
        for part in m.parts:
            if isinstance(part, ImagePart):
                text.append("\x00")
                media.append(part.image)
            else:
                text.append(part.text)
        text.append(END_OF_TURN)
    return "".join(text), media


def _ids(text: str) -> list[int]:
    return [ord(c) for c in text]


@dataclass
class ScriptedEngine:
    """Answers from `respond(trajectory) -> text`; records every batch it was asked to generate."""

    respond: Callable[[Trajectory], str]
    batches: list[list[Trajectory]] = field(default_factory=list)

    def encode_prompt(self, messages: Sequence[Message], *, assistant_prefix: str = "") -> Encoded:
        text, media = _render(messages)
        return Encoded(_ids(text + "[assistant]" + assistant_prefix), media)

    def encode_continuation(
        self, messages: Sequence[Message], *, previous: Generated, assistant_prefix: str = ""
    ) -> Encoded:
        close = "" if previous.text.endswith(END_OF_TURN) else END_OF_TURN
        text, media = _render(messages)
        return Encoded(_ids(close + text + "[assistant]" + assistant_prefix), media)

    async def generate(
        self, trajectories: Sequence[Trajectory], sampling: SamplingParams
    ) -> list[Generated]:
        self.batches.append(list(trajectories))
        outs = []
        for traj in trajectories:
            full = self.respond(traj)
            text = full[: sampling.max_new_tokens]
            ids = _ids(text)
            finish: FinishReason = "length" if len(full) > len(text) else "stop"
            outs.append(Generated(text, ids, [-0.5] * len(ids), finish))
        return outs
