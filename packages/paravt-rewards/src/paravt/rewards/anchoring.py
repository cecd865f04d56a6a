"""Token-level selective anchoring: the anchor credit placed on structural tokens only.

The paper applies the anchoring reward "only at the structural-token positions most prone to
collapse, leaving tool-call content tokens unconstrained"; the reference applies it as one scalar.
Here a completion's token offsets (one `(start, end)` character span per token, as returned by a
fast tokenizer's `return_offsets_mapping=True`) are matched against the tag spans the core parser
found, and each part of R_anchor goes to the tokens of the tags that earned it:

- `</think>` closure (+0.4): the tokens of the first `</think>`;
- full think -> answer flow (+0.3): the tokens of that `</think>` and of the first closed,
  non-empty answer block's `<answer>` and `</answer>`;
- unclosed think (-0.3): where the think should have closed: the tokens of the tag that opened
  while it was open (`<think>\n<answer>B</answer>`: the `<answer>`), or the last token when it
  ran to the end.

With `tool_calls=True` (ours, off by default: the paper names the `<tool_call>` closures among
the positions most prone to collapse, the reference's scalar has no such part) two more parts:

- well-formed calls (+0.3): the `<tool_call>` and `</tool_call>` tokens of every call block that
  is a valid ParaVT call (JSON envelope, known tool, valid arguments), when the turn has one;
- broken calls (-0.3): the tags of every call block that is not (invalid JSON or arguments,
  unknown tool, unclosed, or the prior's `<tool_code>` envelope), when the turn has one.

The call bodies (the JSON, the window the model picks) get nothing either way.

With `format_issues=True` (ours, off by default) one more part:

- format issues (-0.3): the tokens of every span the parser reported as an issue other than a
  call's (text outside the tags, a stray closing tag, a second answer ...), when the turn has
  one: a turn that runs on after its calls until the token limit cuts it is charged on the
  run-on text, where the turn should have ended. A block left open when another opened is
  charged, as the unclosed think is, on the tag that opened inside it: the token that was
  generated where the close was due. (Its span alone can lie wholly in the prompt: the think
  prefix's `<think>\n` followed at once by `<answer>`; the charge then sat on the last token,
  and the token that skipped the think kept its outcome credit.)

A part is split evenly over its tokens and scaled by `lambda_anchor`, so the vector sums to
`lambda_anchor * R_anchor`. When a part's spans have no token in the completion (an unclosed
think that ran to the end, a span wholly in the prompt), that part goes to the last token, so the
sum is kept.
Every other token, including all tool-call content, gets 0.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from typing import NamedTuple

from paravt.core import Issue, IssueKind, ParsedResponse, TagSpan
from paravt.rewards.terms import (
    ANCHOR_BROKEN_CALLS,
    ANCHOR_CLOSE_THINK,
    ANCHOR_FLOW,
    ANCHOR_FORMAT_ISSUES,
    ANCHOR_TOOL_CALLS,
    ANCHOR_UNCLOSED_THINK,
    INVALID_CALL_ISSUES,
    substantive_think,
)

Offsets = Sequence[tuple[int, int]]


_Index = tuple[list[int], list[int], int]


def _tokens_of(span: TagSpan, offsets: Offsets, index: _Index) -> list[int]:
    """Indices of tokens whose character span overlaps `span` (empty spans overlap nothing)."""
    starts, order, longest = index
    out = []
    # tokens sorted by start; all tokens starting before span.end are candidates
    hi = bisect_right(starts, span.end - 1)
    for k in range(hi - 1, -1, -1):
        i = order[k]
        s, e = offsets[i]
        if e > span.start and s < span.end and e > s:
            out.append(i)
        elif s + longest <= span.start:  # nothing further back can reach the span
            break
    return sorted(out)


def _index(offsets: Offsets) -> _Index:
    order = sorted(range(len(offsets)), key=lambda i: offsets[i][0])
    longest = max((e - s for s, e in offsets), default=0)
    return [offsets[i][0] for i in order], order, max(1, longest)


def structural_token_positions(parsed: ParsedResponse, offsets: Offsets) -> list[int]:
    """Indices of the tokens that overlap any structural tag (`<think>`, `</think>`, `<answer>`,
    `</answer>`, tool-call brackets), in order. Offsets are character spans into `parsed.text`."""
    index = _index(offsets)
    found: set[int] = set()
    for tag in parsed.tags:
        found.update(_tokens_of(tag, offsets, index))
    return sorted(found)


class AnchorPart(NamedTuple):
    """One part of R_anchor earned by a response: its name, its value (`lambda_anchor` times the
    part's weight: reward units) and the tokens that carry it."""

    name: str  # close_think, flow, unclosed_think, tool_calls, broken_calls, format_issues
    value: float
    tokens: list[int]  # indices into the offsets; the last token when its tags have none


def anchor_token_parts(
    parsed: ParsedResponse,
    offsets: Offsets,
    *,
    lambda_anchor: float = 0.5,
    min_think_chars: int = 10,
    tool_calls: bool = False,
    format_issues: bool = False,
    charges_only: bool = False,
) -> list[AnchorPart]:
    """The parts of `lambda_anchor * R_anchor` this response earned, each with its tokens (see
    the module docstring). Their values sum to `lambda_anchor * R_anchor` (tool-call parts
    included); without offsets every part has no tokens. With `charges_only` (a structure whose
    format earned nothing: `RewardConfig.format_credit="parses"` and it does not parse) only the
    negative parts: it earns no anchor credit but keeps its charges, on the tokens that broke
    it."""
    if lambda_anchor == 0:
        return []
    n = len(offsets)
    index = _index(offsets)
    first: dict[str, TagSpan] = {}
    for tag in parsed.tags:
        first.setdefault(tag.tag, tag)
    think = substantive_think(parsed, min_think_chars)
    close = first.get("</think>")
    answer = next((b for b in parsed.answer_blocks if b.closed and b.content.strip()), None)

    parts: list[tuple[str, float, list[TagSpan]]] = []
    if close is not None and think:
        parts.append(("close_think", ANCHOR_CLOSE_THINK, [close]))
        if answer is not None:
            a_open = next(t for t in parsed.tags if t.start == answer.start)
            a_close = next(t for t in parsed.tags if t.end == answer.end and t.tag == "</answer>")
            parts.append(("flow", ANCHOR_FLOW, [close, a_open, a_close]))
    opened_at = {t.start: t for t in parsed.tags}
    if "<think>" in first and close is None:
        # charged where the close was due: the tag that opened inside the think, if any
        block = next((b for b in parsed.blocks if b.kind == "think"), None)
        due = opened_at.get(block.end) if block is not None else None
        parts.append(("unclosed_think", ANCHOR_UNCLOSED_THINK, [due] if due else []))
    if tool_calls:
        good, bad = _call_tags(parsed)
        if good:
            parts.append(("tool_calls", ANCHOR_TOOL_CALLS, good))
        if bad:
            parts.append(("broken_calls", ANCHOR_BROKEN_CALLS, bad))
    if format_issues:
        spans = [
            _due(i, opened_at)
            for i in parsed.issues
            if i.kind not in INVALID_CALL_ISSUES and i.end > i.start
        ]
        if spans:
            parts.append(("format_issues", ANCHOR_FORMAT_ISSUES, spans))

    out = []
    for name, value, spans in parts:
        if charges_only and value >= 0:
            continue
        tokens = sorted({i for s in spans for i in _tokens_of(s, offsets, index)}) if n else []
        out.append(AnchorPart(name, lambda_anchor * value, tokens or ([n - 1] if n else [])))
    return out


def _due(issue: Issue, opened_at: dict[int, TagSpan]) -> TagSpan:
    """The span an issue is charged on: a block left open when another opened is charged on
    the tag that opened (where its close was due); any other issue on its own span."""
    if issue.kind is IssueKind.UNCLOSED_TAG and issue.end in opened_at:
        return opened_at[issue.end]
    return TagSpan(issue.kind.value, issue.start, issue.end)


def anchor_token_rewards(
    parsed: ParsedResponse,
    offsets: Offsets,
    *,
    lambda_anchor: float = 0.5,
    min_think_chars: int = 10,
    tool_calls: bool = False,
    charges_only: bool = False,
) -> list[float]:
    """A per-token reward vector (one float per offset) holding `lambda_anchor * R_anchor` on the
    structural tokens that earned it (see the module docstring); zeros elsewhere. With
    `charges_only` only the negative parts (`anchor_token_parts`)."""
    n = len(offsets)
    rewards = [0.0] * n
    if n == 0 or lambda_anchor == 0:
        return rewards
    parts = anchor_token_parts(
        parsed,
        offsets,
        lambda_anchor=lambda_anchor,
        min_think_chars=min_think_chars,
        tool_calls=tool_calls,
        charges_only=charges_only,
    )
    for part in parts:
        share = part.value / len(part.tokens)
        for i in part.tokens:
            rewards[i] += share
    return rewards


def _call_tags(parsed: ParsedResponse) -> tuple[list[TagSpan], list[TagSpan]]:
    """The opening and closing tags of the well-formed ParaVT call blocks, and of the others."""
    by_start = {t.start: t for t in parsed.tags}
    by_end = {t.end: t for t in parsed.tags}
    good: list[TagSpan] = []
    bad: list[TagSpan] = []
    for call in parsed.tool_calls:
        block = call.block
        tags = [t for t in (by_start.get(block.start), by_end.get(block.end)) if t is not None]
        tags = [t for t in tags if t.tag.strip("</>") in ("tool_call", "tool_code")]
        ok = call.ok and call.source == "tool_call" and block.closed
        (good if ok else bad).extend(tags)
    return good, bad


def shift_offsets(offsets: Offsets, by: int) -> list[tuple[int, int]]:
    """Offsets moved right by `by` characters (after a prefix was prepended to the text)."""
    return [(s + by, e + by) for s, e in offsets]
