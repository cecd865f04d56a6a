"""Format, anchoring, tool and penalty terms, and the degenerate-output guard.

Each is a pure function of a `ParsedResponse` (from `paravt.core.parse_response`) plus a few
numbers. The weights restate the reference recipe (see the package README for the table).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import NamedTuple

from paravt.core import IssueKind, ParsedResponse

CHAT_TOKENS = ("<|im_start|>", "<|im_end|>", "<|endoftext|>")
PAIRS = (
    ("<think>", "</think>"),
    ("<tool_call>", "</tool_call>"),
    ("<tool_code>", "</tool_code>"),
    ("<answer>", "</answer>"),
)
TOOL_OPEN = ("<tool_call>", "<tool_code>")
MAX_REPEAT_UNIT = 64

# R_anchor parts (reference values)
ANCHOR_CLOSE_THINK = 0.4
ANCHOR_FLOW = 0.3
ANCHOR_UNCLOSED_THINK = -0.3
# Token-level anchoring of the tool-call boundaries (ours: the paper names the `<tool_call>`
# closures among the structural positions it anchors; the reference has no such part). Used only
# by `anchor_token_rewards(..., tool_calls=True)`, never in the sequence-level scalar.
ANCHOR_TOOL_CALLS = 0.3
ANCHOR_BROKEN_CALLS = -0.3
ANCHOR_FORMAT_ISSUES = -0.3  # ours: the parser's other issues, on their tokens


def strip_chat_tokens(text: str) -> str:
    for tok in CHAT_TOKENS:
        text = text.replace(tok, "")
    return text


def substantive_think(parsed: ParsedResponse, min_chars: int = 10) -> bool:
    """The first think block (closed or not) holds at least `min_chars` characters of text."""
    for block in parsed.blocks:
        if block.kind == "think":
            content = block.content
            cut = content.find("<|im_end|>")  # an unclosed think ends where the chat turn ends
            if cut != -1:
                content = content[:cut]
            return len(content.strip()) >= min_chars
    return False


def nonempty_answer(parsed: ParsedResponse) -> bool:
    """Some answer block is closed and has a non-blank body."""
    for block in parsed.blocks:
        if (
            block.kind == "answer"
            and block.closed
            and not block.content.isspace()
            and block.content
        ):
            return True
    return False


def parseable_call(parsed: ParsedResponse) -> bool:
    """Some tool-call block was understood as a call with a tool name (valid or not)."""
    return any(c.name is not None for c in parsed.tool_calls)


def evidence_call(parsed: ParsedResponse, responses: int) -> bool:
    """A call that can have brought evidence, as far as a text shows: a valid call (JSON
    envelope, known tool, valid arguments) and at least one tool response that came back.
    An episode knows more (`Episode.tool_responses_ok`: executed calls that returned without an
    error); `score_episode` uses that instead."""
    return responses > 0 and any(c.ok for c in parsed.tool_calls)


def think_before_tool(parsed: ParsedResponse) -> bool:
    """The first `<think>` tag comes before the first tool-call tag."""
    for tag in parsed.tags:
        name = tag.tag
        if name == "<think>":
            counts = parsed.tag_counts_view()
            return counts["<tool_call>"] + counts["<tool_code>"] > 0
        if name in TOOL_OPEN:
            return False
    return False


def tags_balanced(parsed: ParsedResponse) -> bool:
    """Every opening tag count equals its closing tag count (think, tool_call, tool_code, answer)."""
    counts = parsed.tag_counts_view()
    return all(counts[o] == counts[c] for o, c in PAIRS)


class FormatTerms(NamedTuple):
    """The format terms of one response (a tuple: cheap to build once per score)."""

    base: float  # R_base_fmt in [0, 1]
    anchor: float  # R_anchor in [-0.3, 0.7], unscaled
    think: bool
    answer: bool
    think_before_tool: bool
    balanced: bool


def format_terms(
    parsed: ParsedResponse,
    *,
    answer_suffix: bool = True,
    min_think_chars: int = 10,
    think_before_tool_bonus: float = 0.3,
    balanced_tags_bonus: float = 0.1,
    parseable: bool | None = None,
) -> FormatTerms:
    """The base format reward and the (unscaled) anchoring reward of one response.

    Base: substantive think +0.2, `<answer>` +0.3, `</answer>` +0.2 with answer_suffix (else
    0.3 / 0.2 / 0.1); the answer credit needs a closed answer with a non-empty body. Plus
    `think_before_tool_bonus` when a substantive think precedes the first parseable call, plus
    `balanced_tags_bonus` when anything was earned and all tag pairs balance; capped at 1.
    Anchor: +0.4 for `</think>` after a substantive think, +0.3 more for the full
    think -> answer flow, -0.3 when `<think>` is opened and never closed.
    `parseable` is whether a call earns the think-before-call bonus: `parseable_call(parsed)`
    when None (the released rule); under `tool_credit="evidence"` the scorer passes whether a
    call brought evidence.
    """
    think_w, open_w, close_w = (0.2, 0.3, 0.2) if answer_suffix else (0.3, 0.2, 0.1)
    think = substantive_think(parsed, min_chars=min_think_chars)
    answer = nonempty_answer(parsed)
    order = (
        think
        and think_before_tool(parsed)
        and (parseable_call(parsed) if parseable is None else parseable)
    )
    base = think_w * think + (open_w + close_w) * answer + think_before_tool_bonus * order
    counts = parsed.tag_counts_view()
    balanced = (
        counts["<think>"] == counts["</think>"]
        and counts["<answer>"] == counts["</answer>"]
        and counts["<tool_call>"] == counts["</tool_call>"]
        and counts["<tool_code>"] == counts["</tool_code>"]
    )
    if base > 0 and balanced:
        base += balanced_tags_bonus
    closed_think = counts["</think>"] > 0
    anchor = 0.0
    if closed_think and think:
        anchor += ANCHOR_CLOSE_THINK
        if answer:
            anchor += ANCHOR_FLOW
    if counts["<think>"] > 0 and not closed_think:
        anchor += ANCHOR_UNCLOSED_THINK
    return FormatTerms(min(1.0, base), anchor, think, answer, order, balanced)


def tool_reward(parseable: bool, responded: bool, accuracy: float) -> float:
    """Graduated tool reward: 0 without a parseable call; 0.1, or 0.3 once a tool response came
    back; +0.5 when the answer also earned accuracy; capped at 1. Under
    `tool_credit="evidence"` the scorer passes `parseable=responded=` whether a call brought
    evidence, so the 0.1 for a call that brought nothing is never paid."""
    if not parseable:
        return 0.0
    reward = 0.3 if responded else 0.1
    if accuracy > 0:
        reward += 0.5
    return min(1.0, reward)


INVALID_CALL_ISSUES = frozenset(
    {
        IssueKind.INVALID_JSON,
        IssueKind.INVALID_CALL,
        IssueKind.EMPTY_TOOL_CALL,
        IssueKind.UNKNOWN_TOOL,
        IssueKind.INVALID_ARGUMENTS,
    }
)


def invalid_calls(parsed: ParsedResponse, max_calls_per_turn: int) -> tuple[int, int]:
    """(invalid, attempts) for one turn: calls that failed to parse or validate, plus valid calls
    beyond `max_calls_per_turn`, over all call attempts."""
    attempts = len(parsed.tool_calls)
    valid = sum(1 for c in parsed.tool_calls if c.ok)
    return (attempts - valid) + max(0, valid - max_calls_per_turn), attempts


def penalty_fraction(invalid: int, attempts: int) -> float:
    """Fraction of call attempts that were invalid, in [0, 1] (0 without attempts)."""
    return min(1.0, invalid / attempts) if attempts > 0 else 0.0


def is_chat_spam(text: str, min_tokens: int = 5, max_chars: int = 300) -> bool:
    """Reference guard: at least `min_tokens` '<|im_start|>' in a completion under `max_chars`."""
    return len(text) < max_chars and text.count("<|im_start|>") >= min_tokens


def is_runaway_repetition(text: str, min_chars: int = 400) -> bool:
    """The text ends with a unit of at most 64 characters repeated over >= `min_chars`
    (a generation that never stopped). Checks only the tail; linear in `min_chars`."""
    if len(text) < min_chars:
        return False
    for period in range(1, MAX_REPEAT_UNIT + 1):
        unit = text[-period:]
        reps = -(-min_chars // period)
        if len(text) >= reps * period and text.endswith(unit * reps):
            # a long run of one whitespace character is layout, not a runaway generation
            return not unit.isspace()
    return False


def degenerate_reason(
    text: str,
    *,
    guard: bool,
    spam_min_tokens: int,
    spam_max_chars: int,
    repetition: bool,
    repetition_min_chars: int,
) -> str | None:
    """'chat_token_spam', 'runaway_repetition' or None."""
    if guard and is_chat_spam(text, spam_min_tokens, spam_max_chars):
        return "chat_token_spam"
    if repetition and is_runaway_repetition(text, repetition_min_chars):
        return "runaway_repetition"
    return None


def stray_texts(parsed: ParsedResponse) -> Iterable[str]:
    """Text outside every tag, in order, as the parser reported it."""
    text = parsed.text
    for start, end in parsed.outside_spans():
        yield text[start:end]


# A closing tag of a tool block right after outside text means the text is that block's body
# with its opening tag lost (`a red square</tool_response>`): it is not the model's answer either.
FALLBACK_MAX_CHARS = 65_536
_TOOL_CLOSE_AFTER = re.compile(r"\s*</tool_(?:call|code|response)>")


def answer_text(parsed: ParsedResponse, fallback: bool = True) -> str | None:
    """The graded answer: the last closed `<answer>` body; with `fallback`, else the last text
    outside any tag (chat tokens removed). Tool blocks (`tool_call`, `tool_code`,
    `tool_response`) are never the answer: their bodies are blocks, not outside text, and text
    that ends at a stray closing tool tag is skipped. None when there is nothing to grade."""
    answer = parsed.answer
    if answer:
        return answer
    if not fallback or answer is not None:  # an explicit empty answer is not replaced
        return None
    text = parsed.text
    for start, end in reversed(parsed.outside_spans()):
        if _TOOL_CLOSE_AFTER.match(text, end):
            continue
        # answers are graded on their first 16 KiB; a longer outside text is read from its first
        # 64 KiB only, so a megabyte of stray text costs no more than that
        chunk = strip_chat_tokens(text[start : min(end, start + FALLBACK_MAX_CHARS)]).strip()
        if chunk:
            return chunk
    return None
