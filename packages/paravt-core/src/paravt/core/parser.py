"""The one parser of model responses: `parse_response(text) -> ParsedResponse`.

A response is `<think>...</think>`, zero or more `<tool_call>{json}</tool_call>` (or the leaked
Python form `<tool_code>crop_video(start_time=1, end_time=9)</tool_code>`), then `<answer>...</answer>`.
A multi-turn transcript (what verl, AReaL, OpenRLHF and TRL's tool loop hand to reward functions)
also carries the environment's `<tool_response>...</tool_response>` blocks inline.

The parser finds every structural tag with its character span, groups them into blocks, parses and
validates each tool call, and records what was malformed. It never raises, and it is linear in the
input: tags are found by one compiled regular expression without backtracking (a literal `<`, an
alternation of fixed words, `>`), every tag is visited once, and tool-call bodies are parsed once
each. Tool blocks (`tool_call`, `tool_code`, `tool_response`) are never answer text.

Rewards, the agent runtime, training and evaluation all use this parser; nobody re-parses.

One file because it is one grammar read in one pass: the tag scanner, the tool-call bodies and the
answer fallback share its state, and split across files the pass would be harder to follow.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from operator import itemgetter
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ValidationError

from paravt.core.protocol import CROP_VIDEO, CropVideoArgs, format_validation_error, parse_time_s

BlockKind = Literal["think", "tool_call", "tool_code", "tool_response", "answer"]
KINDS: tuple[BlockKind, ...] = ("think", "tool_call", "tool_code", "tool_response", "answer")
OPEN_TAGS: dict[str, BlockKind] = {f"<{k}>": k for k in KINDS}
CLOSE_TAGS: dict[str, BlockKind] = {f"</{k}>": k for k in KINDS}
STRUCTURAL_TAGS = tuple(OPEN_TAGS) + tuple(CLOSE_TAGS)
# Blocks that hold a tool call or a tool's reply: never graded as the model's answer.
TOOL_BLOCKS: frozenset[str] = frozenset({"tool_call", "tool_code", "tool_response"})
# Written by the environment. Its body is opaque: tags inside it are text, not structure.
TOOL_RESPONSE_TAG = "<tool_response>"
TOOL_RESPONSE_CLOSE = "</tool_response>"
# Every structural tag, found in one pass: a literal "<", an optional "/", one of five fixed
# words, ">". Alternatives are literals, so matching never backtracks more than one word.
_TAG_PATTERN = re.compile(r"</?(?:think|tool_call|tool_code|tool_response|answer)>")
# tag -> (block kind, is an opening tag, length)
_TAG_INFO: dict[str, tuple[BlockKind, bool, int]] = {
    **{t: (k, True, len(t)) for t, k in OPEN_TAGS.items()},
    **{t: (k, False, len(t)) for t, k in CLOSE_TAGS.items()},
}
# Positional arguments of the leaked Python form, in the order the tool declares them.
POSITIONAL_ARGS = {CROP_VIDEO: ("start_time", "end_time", "num_frames")}
DEFAULT_TOOLS: Mapping[str, type[BaseModel]] = {CROP_VIDEO: CropVideoArgs}
# Tool-call bodies longer than this are not parsed (a valid call is a few hundred characters).
MAX_CALL_CHARS = 64_000
# Structural tags parsed per text at most. A real turn holds tens (a 3-turn transcript with five
# calls a turn about 70); thousands are tag spam, whose rest is reported as one `too_many_tags`
# issue instead of one block and issue per tag, so spam costs what scanning it costs.
MAX_TAGS = 4096


class IssueKind(str, Enum):
    UNCLOSED_TAG = "unclosed_tag"  # an opened block never closed (or closed by another block)
    UNEXPECTED_CLOSE = "unexpected_close"  # a closing tag with no matching open block
    NESTED_TAG = "nested_tag"  # a block opened inside a block of the same kind
    INVALID_JSON = "invalid_json"  # a <tool_call> body that is not a JSON object
    INVALID_CALL = "invalid_call"  # JSON/Python that is not a call (no name, bad arguments shape)
    EMPTY_TOOL_CALL = "empty_tool_call"
    UNKNOWN_TOOL = "unknown_tool"
    INVALID_ARGUMENTS = "invalid_arguments"  # a known tool with arguments its schema rejects
    TEXT_OUTSIDE_TAGS = "text_outside_tags"
    MULTIPLE_ANSWERS = "multiple_answers"
    EMPTY_ANSWER = "empty_answer"
    CALL_AFTER_ANSWER = "call_after_answer"
    # a <tool_response> in a single model turn: the environment writes those, never the model
    MODEL_TOOL_RESPONSE = "model_tool_response"
    TOO_MANY_TAGS = "too_many_tags"  # more than MAX_TAGS tags: the rest is not parsed


class TagSpan(NamedTuple):
    """One structural tag as it appears in the text: `text[start:end] == tag`."""

    tag: str
    start: int
    end: int


class Block(NamedTuple):
    """A tagged block. `start:end` covers the tags; `content_start:content_end` the body."""

    kind: BlockKind
    start: int
    end: int
    content_start: int
    content_end: int
    closed: bool
    content: str


class Issue(NamedTuple):
    """One structural problem: its kind, a message naming it, and the span of text it covers."""

    kind: IssueKind
    message: str
    start: int
    end: int


_ISSUE_ORDER = itemgetter(2, 3)
# `_tuple_new(TagSpan, (...))` skips the generated Python `__new__` (one object per tag).
_tuple_new = tuple.__new__
_CALL_KINDS = frozenset({"tool_call", "tool_code"})
_NO_CONTEXT: Mapping[str, Any] = {}  # validation context without limits (never written to)
_DECODER = json.JSONDecoder()
_json_scan = _DECODER.scan_once  # type: ignore[attr-defined]  # the C scanner json.loads uses
_JSON_SPACE = re.compile(r"[ \t\n\r]*")


def _json_decode(body: str) -> Any:
    """`json.loads(body)`, calling the C scanner directly for a valid body (json.loads spends as
    long in its Python wrappers as in scanning a call); an invalid one goes through `json.loads`'s
    own path, so its error message is the usual one."""
    try:
        obj, end = _json_scan(body, _JSON_SPACE.match(body).end())  # type: ignore[union-attr]
        if _JSON_SPACE.match(body, end).end() == len(body):  # type: ignore[union-attr]
            return obj
    except (StopIteration, ValueError):
        pass
    return _DECODER.decode(body)


@dataclass(slots=True)
class ToolCall:
    """One attempted tool call. `args` is set when the name is known and the arguments validate.

    Read-only by convention (not frozen: a frozen dataclass costs twice as much to build, and the
    parser builds one per call)."""

    name: str | None
    arguments: dict[str, Any]
    block: Block
    source: Literal["tool_call", "tool_code"]
    args: BaseModel | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.args is not None and self.error is None


@dataclass
class ParsedResponse:
    """Everything structural about one response (or one multi-turn transcript, `transcript`)."""

    text: str
    blocks: list[Block] = field(default_factory=list)
    tags: list[TagSpan] = field(default_factory=list)
    tool_calls: list[ToolCall] = field(default_factory=list)
    issues: list[Issue] = field(default_factory=list)
    transcript: bool = False
    _counts: dict[str, int] | None = field(default=None, repr=False, compare=False)

    @property
    def think_blocks(self) -> list[Block]:
        return [b for b in self.blocks if b.kind == "think"]

    @property
    def answer_blocks(self) -> list[Block]:
        return [b for b in self.blocks if b.kind == "answer"]

    @property
    def tool_response_blocks(self) -> list[Block]:
        return [b for b in self.blocks if b.kind == "tool_response"]

    @property
    def think(self) -> str | None:
        """The text of the first think block (closed or not), stripped."""
        for b in self.blocks:
            if b.kind == "think":
                return b.content.strip()
        return None

    @property
    def answer(self) -> str | None:
        """The body of the last *closed* answer block, stripped; None when there is none."""
        for b in reversed(self.blocks):
            if b.kind == "answer" and b.closed:
                return b.content.strip()
        return None

    @property
    def valid_calls(self) -> list[ToolCall]:
        return [c for c in self.tool_calls if c.ok]

    @property
    def invalid_calls(self) -> list[ToolCall]:
        return [c for c in self.tool_calls if not c.ok]

    @property
    def num_tool_responses(self) -> int:
        """How many `<tool_response>` blocks the text holds. A single model turn has none (one
        there is the model's own writing, reported as `model_tool_response`); a multi-turn
        transcript carries the environment's replies inline, and rewards need to know that a tool
        answered."""
        return self.tag_counts_view()[TOOL_RESPONSE_TAG]

    def has_issue(self, kind: IssueKind) -> bool:
        return any(i.kind == kind for i in self.issues)

    @property
    def well_formed(self) -> bool:
        """No structural problem at all: every tag balanced, every call valid, nothing stray."""
        return not self.issues

    def tag_counts(self) -> dict[str, int]:
        """How many times each structural tag occurs (a new dict; tags inside a tool response's
        opaque body are text and not counted)."""
        return dict(self.tag_counts_view())

    def tag_counts_view(self) -> Mapping[str, int]:
        """`tag_counts()` computed once and shared; do not modify it."""
        counts = self._counts
        if counts is None:
            counts = dict.fromkeys(STRUCTURAL_TAGS, 0)
            for t in self.tags:
                counts[t.tag] += 1
            self._counts = counts
        return counts

    def outside_spans(self) -> list[tuple[int, int]]:
        """Character spans of the non-blank text outside every block, in order (stripped)."""
        return [(i.start, i.end) for i in self.issues if i.kind is IssueKind.TEXT_OUTSIDE_TAGS]


def _literal(node: ast.AST) -> Any:
    return ast.literal_eval(node)


def _parse_python_call(body: str) -> tuple[str, list[Any], dict[str, Any]]:
    """`crop_video(1, end_time=9)` or `print(crop_video(...))` -> (name, positional, keyword)."""
    tree = ast.parse(body.strip(), mode="eval")
    node = tree.body
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "print"
        and len(node.args) == 1
        and not node.keywords
        and isinstance(node.args[0], ast.Call)
    ):
        node = node.args[0]
    if not isinstance(node, ast.Call):
        raise ValueError("expected a function call such as crop_video(start_time=1, end_time=9)")
    func = node.func
    if isinstance(func, ast.Name):
        name = func.id
    elif isinstance(func, ast.Attribute):
        name = func.attr
    else:
        raise ValueError("the called object is not a plain function name")
    positional = [_literal(a) for a in node.args]
    keywords: dict[str, Any] = {}
    for kw in node.keywords:
        if kw.arg is None:
            raise ValueError("**kwargs are not allowed in a tool call")
        keywords[kw.arg] = _literal(kw.value)
    return name, positional, keywords


def _is_time(value: Any) -> bool:
    try:
        parse_time_s(value)
    except ValueError:
        return False
    return True


class _Builder:
    def __init__(self, text: str, tools: Mapping[str, type[BaseModel]], context: Mapping[str, Any]):
        self.text = text
        self.tools = tools
        self.context = context
        self.out = ParsedResponse(text, [], [], [], [])

    def issue(self, kind: IssueKind, message: str, start: int, end: int) -> None:
        self.out.issues.append(Issue(kind, message, start, end))

    def model_tool_response(self, block: Block) -> None:
        self.issue(
            IssueKind.MODEL_TOOL_RESPONSE,
            "<tool_response> written in a model turn: tool responses come from the environment; "
            "it is not a tool result and never the answer",
            block.start,
            block.end,
        )

    def tool_call(self, block: Block) -> None:
        source: Literal["tool_call", "tool_code"] = (
            "tool_call" if block.kind == "tool_call" else "tool_code"
        )
        body = block.content
        span = (block.start, block.end)
        if not body or body.isspace():
            self.issue(IssueKind.EMPTY_TOOL_CALL, f"empty <{block.kind}>", *span)
            self.out.tool_calls.append(ToolCall(None, {}, block, source, error="empty tool call"))
            return
        if len(body) > MAX_CALL_CHARS:
            msg = (
                f"tool call body of {len(body)} characters is too long to be a call "
                f"(at most {MAX_CALL_CHARS})"
            )
            self.issue(IssueKind.INVALID_CALL, msg, *span)
            self.out.tool_calls.append(ToolCall(None, {}, block, source, error=msg))
            return
        name: Any
        arguments: Any
        try:
            if block.kind == "tool_call":
                try:
                    obj = _json_decode(body)
                except (ValueError, RecursionError) as exc:
                    msg = f"tool call is not valid JSON: {exc}"
                    self.issue(IssueKind.INVALID_JSON, msg, *span)
                    self.out.tool_calls.append(ToolCall(None, {}, block, source, error=msg))
                    return
                if not isinstance(obj, dict):
                    raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
                name = obj.get("name")
                arguments = obj.get("arguments", obj.get("parameters", {}))
                if isinstance(arguments, str):  # OpenAI style: arguments as a JSON string
                    arguments = _json_decode(arguments) if arguments.strip() else {}
            else:
                name, positional, arguments = _parse_python_call(body)
                order = POSITIONAL_ARGS.get(name, ())
                # Released checkpoints pass video_path first; a leading non-time string is it.
                if positional and isinstance(positional[0], str) and not _is_time(positional[0]):
                    positional = positional[1:]
                if len(positional) > len(order):
                    raise ValueError(f"{name} takes at most {len(order)} positional arguments")
                for key, value in zip(order, positional):
                    if key in arguments:
                        raise ValueError(f"{key} given both by position and by keyword")
                    arguments[key] = value
            if not isinstance(name, str) or not name:
                raise ValueError("the call has no tool name")
            if not isinstance(arguments, dict):
                raise ValueError(f"arguments must be an object, got {type(arguments).__name__}")
        except Exception as exc:  # never raise on model output, whatever the body holds
            msg = f"not a tool call: {str(exc)[:200]}"
            self.issue(IssueKind.INVALID_CALL, msg, *span)
            self.out.tool_calls.append(ToolCall(None, {}, block, source, error=msg))
            return
        model = self.tools.get(name)
        if model is None:
            known = ", ".join(sorted(self.tools)) or "none"
            msg = f"unknown tool {name[:60]!r} (known: {known})"
            self.issue(IssueKind.UNKNOWN_TOOL, msg, *span)
            self.out.tool_calls.append(ToolCall(name, arguments, block, source, error=msg))
            return
        try:
            # the model's validator directly (model_validate is a Python wrapper around it)
            args = model.__pydantic_validator__.validate_python(arguments, context=self.context)
        except ValidationError as exc:
            msg = format_validation_error(name, exc)
            self.issue(IssueKind.INVALID_ARGUMENTS, msg, *span)
            self.out.tool_calls.append(ToolCall(name, arguments, block, source, error=msg))
            return
        error = None if block.closed else f"<{block.kind}> is never closed; not executed"
        self.out.tool_calls.append(ToolCall(name, arguments, block, source, args=args, error=error))


def parse_response(
    text: str,
    *,
    tools: Mapping[str, type[BaseModel]] | None = None,
    max_num_frames: int | None = None,
    transcript: bool = False,
) -> ParsedResponse:
    """Parse one model response (or, with `transcript=True`, a multi-turn transcript). Never
    raises; linear time in `len(text)`.

    `tools` maps tool names to their argument models (default: `crop_video` -> `CropVideoArgs`);
    `max_num_frames` bounds `num_frames` of crop calls (default 16; a larger request is clamped
    and the clamp is stated in `CropVideoArgs.clamps`).

    Rules: a block is opened by its tag and closed by the matching closing tag. An opening tag of a
    *different* kind inside an open block closes that block implicitly (recorded as `unclosed_tag`);
    one of the *same* kind is `nested_tag` and ignored. A closing tag with no open block is
    `unexpected_close`. Non-blank text outside blocks is `text_outside_tags`. `answer` is the last
    closed answer block; more than one answer block is `multiple_answers`. After `MAX_TAGS` tags the
    rest of the text is one `too_many_tags` issue and is not parsed. A `<tool_response>` body is
    opaque (tags inside it are text) up to its `</tool_response>`; in a single model turn
    (`transcript=False`) every tool response is `model_tool_response`, since only the environment
    writes them.
    """
    if type(text) is not str:
        text = str(text)
    context = {"max_num_frames": max_num_frames} if max_num_frames else _NO_CONTEXT
    b = _Builder(text, DEFAULT_TOOLS if tools is None else tools, context)
    out = b.out
    if transcript:
        out.transcript = True
    _scan(text, b, transcript)
    blocks, issues = out.blocks, out.issues

    answers = [blk for blk in blocks if blk.kind == "answer"] if "<answer>" in text else None
    if answers:
        if len(answers) > 1:
            b.issue(
                IssueKind.MULTIPLE_ANSWERS,
                f"{len(answers)} answer blocks; the last closed one is used",
                answers[1].start,
                answers[-1].end,
            )
        for blk in answers:
            if blk.closed and not blk.content.strip():
                b.issue(IssueKind.EMPTY_ANSWER, "empty <answer>", blk.start, blk.end)
        if out.tool_calls:
            first_answer = answers[0].start
            late = [c for c in out.tool_calls if c.block.start > first_answer]
            if late:
                b.issue(
                    IssueKind.CALL_AFTER_ANSWER,
                    f"{len(late)} tool call(s) after the answer",
                    late[0].block.start,
                    late[-1].block.end,
                )
    if len(issues) > 1:
        issues.sort(key=_ISSUE_ORDER)
    return out


def _scan(text: str, b: _Builder, transcript: bool) -> None:
    """The general scanner: every tag in order through the block state machine (any input)."""
    out = b.out
    tags: list[TagSpan] = out.tags
    blocks: list[Block] = out.blocks
    issues: list[Issue] = out.issues
    add_tag, add_block, add_issue = tags.append, blocks.append, issues.append
    info = _TAG_INFO
    open_kind: str | None = None
    open_start = content_start = 0
    cursor = 0  # end of the last consumed structure, for text-outside-tags detection
    skip_to = -1  # inside a tool response: tags before its closing tag are text
    stop = len(text)  # where parsing stopped (before the tag after the first MAX_TAGS)
    budget = MAX_TAGS
    counts = out._counts = dict.fromkeys(STRUCTURAL_TAGS, 0)
    for m in _TAG_PATTERN.finditer(text):
        start = m.start()
        if start < skip_to:
            continue
        budget -= 1
        if budget < 0:
            stop = start
            add_issue(
                _tuple_new(
                    Issue,
                    (
                        IssueKind.TOO_MANY_TAGS,
                        f"more than {MAX_TAGS} structural tags: tag spam; the "
                        f"{len(text) - start} characters from offset {start} on are not parsed",
                        start,
                        len(text),
                    ),
                )
            )
            break
        tag = m.group()
        kind, opening, length = info[tag]
        end = start + length
        add_tag(_tuple_new(TagSpan, (tag, start, end)))
        counts[tag] += 1
        if opening:
            if open_kind is None:
                if start > cursor:
                    _stray(text, cursor, start, issues)
            elif open_kind == kind:
                add_issue(
                    _tuple_new(Issue, (IssueKind.NESTED_TAG, f"{tag} inside <{kind}>", start, end))
                )
                continue
            else:  # a different block starts: the open one was never closed
                content = text[content_start:start]
                block = _tuple_new(
                    Block, (open_kind, open_start, start, content_start, start, False, content)
                )
                add_block(block)
                add_issue(
                    _tuple_new(
                        Issue,
                        (
                            IssueKind.UNCLOSED_TAG,
                            f"<{open_kind}> is never closed",
                            open_start,
                            start,
                        ),
                    )
                )
                if open_kind in _CALL_KINDS:
                    b.tool_call(block)
                elif open_kind == "tool_response" and not transcript:
                    b.model_tool_response(block)
            open_kind, open_start, content_start = kind, start, end
            if kind == "tool_response":
                close = text.find(TOOL_RESPONSE_CLOSE, end)
                skip_to = close if close != -1 else len(text) + 1
        elif open_kind == kind:
            block = _tuple_new(
                Block,
                (kind, open_start, end, content_start, start, True, text[content_start:start]),
            )
            add_block(block)
            if kind in _CALL_KINDS:
                b.tool_call(block)
            elif kind == "tool_response" and not transcript:
                b.model_tool_response(block)
            open_kind = None
            cursor = end
        else:
            where = f" inside <{open_kind}>" if open_kind else ""
            add_issue(
                _tuple_new(
                    Issue,
                    (
                        IssueKind.UNEXPECTED_CLOSE,
                        f"{tag} without a matching <{kind}>{where}",
                        start,
                        end,
                    ),
                )
            )
            if open_kind is None:
                if start > cursor:
                    _stray(text, cursor, start, issues)
                cursor = end
    if open_kind is not None:
        block = _tuple_new(
            Block,
            (open_kind, open_start, stop, content_start, stop, False, text[content_start:stop]),
        )
        add_block(block)
        add_issue(
            _tuple_new(
                Issue, (IssueKind.UNCLOSED_TAG, f"<{open_kind}> is never closed", open_start, stop)
            )
        )
        if open_kind in _CALL_KINDS:
            b.tool_call(block)
        elif open_kind == "tool_response" and not transcript:
            b.model_tool_response(block)
    elif stop > cursor:
        _stray(text, cursor, stop, issues)


def _stray(text: str, start: int, end: int, issues: list[Issue]) -> None:
    """Record `text[start:end]` as text outside tags unless it is blank (span stripped)."""
    chunk = text[start:end]
    if chunk.isspace():
        return
    stripped = chunk.strip()
    lead = chunk.find(stripped[0])
    issues.append(
        _tuple_new(
            Issue,
            (
                IssueKind.TEXT_OUTSIDE_TAGS,
                f"text outside tags: {stripped[:40]!r}",
                start + lead,
                start + lead + len(stripped),
            ),
        )
    )
