"""One format measure for every training arm, and the tool prior's leaks.

Each arm's f_tau is its own training format reward, and two arms with different reward presets
(vanilla's tops out at 0.7 without a call, PARA-GRPO's adds the anchor term) are not comparable on
it. `episode_structure` reads the main agent's turns the same way for every arm:

- `parses`: every structural block of every main turn parses in ParaVT's format: no structural
  issue from the core parser (unclosed or stray tags, nesting, invalid or unknown calls, text
  outside the tags, an empty or a second answer, a call after the answer, a model-written tool
  response), every call a `<tool_call>` JSON block (a `<tool_code>` block is the prior's envelope,
  not ParaVT's, even where the reference parser runs it), and a closed, non-empty `<answer>` in
  the last turn;
- `tool_code`: a `<tool_code>` block in some main turn: the Python-call envelope a pretrained
  Qwen-VL leaks (the tool prior of the miniature, `paravt.train.miniature`);
- `untagged_answer`: the last turn has no `<answer>` block but some text outside every tag: an
  answer written the prior's way;
- `prior_leak`: either of the two.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from paravt.core import ParsedResponse
from paravt.rewards.terms import answer_text


@dataclass(frozen=True)
class Structure:
    """How one episode's main-agent turns are written (see the module docstring)."""

    parses: bool
    tool_code: bool
    untagged_answer: bool

    @property
    def prior_leak(self) -> bool:
        return self.tool_code or self.untagged_answer


def _has_answer_block(parsed: ParsedResponse) -> bool:
    return any(b.kind == "answer" for b in parsed.blocks)


def episode_structure(turns: Sequence[ParsedResponse]) -> Structure:
    """The `Structure` of an episode's main-agent turns (each parsed as generated, think prefix
    included); an episode without turns parses nowhere."""
    if not turns:
        return Structure(parses=False, tool_code=False, untagged_answer=False)
    tool_code = any(b.kind == "tool_code" for t in turns for b in t.blocks)
    last = turns[-1]
    untagged = not _has_answer_block(last) and bool((answer_text(last, True) or "").strip())
    answer = last.answer
    parses = (
        not tool_code
        and all(t.well_formed for t in turns)
        and answer is not None
        and bool(answer.strip())
    )
    return Structure(parses=parses, tool_code=tool_code, untagged_answer=untagged)
