"""The one parser of model responses: `parse_response(text) -> ParsedResponse`.

A response is `<think>...</think>`, zero or more `<tool_call>{json}</tool_call>` (or the leaked
Python form `<tool_code>crop_video(start_time=1, end_time=9)</tool_code>`), then `<answer>...</answer>`.
The parser finds every structural tag with its character span, groups them into blocks, parses and
validates each tool call, and records what was malformed. It never raises, and it is linear in the
input: tags are found with `str.find` (no backtracking regexes), each character is visited a bounded
number of times, and tool-call bodies are parsed once each.

Rewards, the agent runtime, training and evaluation all use this parser; nobody re-parses.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from paravt.core.protocol import CROP_VIDEO, CropVideoArgs, format_validation_error, parse_time_s

BlockKind = Literal["think", "tool_call", "tool_code", "answer"]
KINDS: tuple[BlockKind, ...] = ("think", "tool_call", "tool_code", "answer")
OPEN_TAGS = {f"<{k}>": k for k in KINDS}
CLOSE_TAGS = {f"</{k}>": k for k in KINDS}
STRUCTURAL_TAGS = tuple(OPEN_TAGS) + tuple(CLOSE_TAGS)
# Written by the environment, not the model; counted, not parsed into blocks.
TOOL_RESPONSE_TAG = "<tool_response>"
# Positional arguments of the leaked Python form, in the order the tool declares them.
POSITIONAL_ARGS = {CROP_VIDEO: ("start_time", "end_time", "num_frames")}
DEFAULT_TOOLS: Mapping[str, type[BaseModel]] = {CROP_VIDEO: CropVideoArgs}
# Tool-call bodies longer than this are not parsed (a valid call is a few hundred characters).
MAX_CALL_CHARS = 64_000


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


@dataclass(frozen=True)
class TagSpan:
    """One structural tag as it appears in the text: `text[start:end] == tag`."""

    tag: str
    start: int
    end: int


@dataclass(frozen=True)
class Block:
    """A tagged block. `start:end` covers the tags; `content_start:content_end` the body."""

    kind: BlockKind
    start: int
    end: int
    content_start: int
    content_end: int
    closed: bool
    content: str


@dataclass(frozen=True)
class Issue:
    kind: IssueKind
    message: str
    start: int
    end: int


@dataclass(frozen=True)
class ToolCall:
    """One attempted tool call. `args` is set when the name is known and the arguments validate."""

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
    """Everything structural about one response."""

    text: str
    blocks: list[Block] = field(default_factory=list)
    tags: list[TagSpan] = field(default_factory=list)
    tool_calls: list[ToolCall] = field(default_factory=list)
    issues: list[Issue] = field(default_factory=list)

    @property
    def think_blocks(self) -> list[Block]:
        return [b for b in self.blocks if b.kind == "think"]

    @property
    def answer_blocks(self) -> list[Block]:
        return [b for b in self.blocks if b.kind == "answer"]

    @property
    def think(self) -> str | None:
        """The text of the first think block (closed or not), stripped."""
        blocks = self.think_blocks
        return blocks[0].content.strip() if blocks else None

    @property
    def answer(self) -> str | None:
        """The body of the last *closed* answer block, stripped; None when there is none."""
        closed = [b for b in self.answer_blocks if b.closed]
        return closed[-1].content.strip() if closed else None

    @property
    def valid_calls(self) -> list[ToolCall]:
        return [c for c in self.tool_calls if c.ok]

    @property
    def invalid_calls(self) -> list[ToolCall]:
        return [c for c in self.tool_calls if not c.ok]

    @property
    def num_tool_responses(self) -> int:
        """How many `<tool_response>` openings the text holds. A single model turn has none; a
        multi-turn transcript (what verl/AReaL/OpenRLHF hand to reward functions) carries the
        environment's replies inline, and rewards need to know that a tool answered."""
        return self.text.count(TOOL_RESPONSE_TAG)

    def has_issue(self, kind: IssueKind) -> bool:
        return any(i.kind == kind for i in self.issues)

    @property
    def well_formed(self) -> bool:
        """No structural problem at all: every tag balanced, every call valid, nothing stray."""
        return not self.issues

    def tag_counts(self) -> dict[str, int]:
        counts = dict.fromkeys(STRUCTURAL_TAGS, 0)
        for t in self.tags:
            counts[t.tag] += 1
        return counts


def _find_tags(text: str) -> list[TagSpan]:
    """Every structural tag in order, one pass over the '<' characters."""
    out: list[TagSpan] = []
    i = text.find("<")
    while i != -1:
        found = None
        if text.startswith("</", i):
            for tag in CLOSE_TAGS:
                if text.startswith(tag, i):
                    found = tag
                    break
        else:
            for tag in OPEN_TAGS:
                if text.startswith(tag, i):
                    found = tag
                    break
        if found:
            out.append(TagSpan(found, i, i + len(found)))
            i = text.find("<", i + len(found))
        else:
            i = text.find("<", i + 1)
    return out


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
    def __init__(self, text: str, tools: Mapping[str, type[BaseModel]], context: dict[str, Any]):
        self.text = text
        self.tools = tools
        self.context = context
        self.out = ParsedResponse(text=text)

    def issue(self, kind: IssueKind, message: str, start: int, end: int) -> None:
        self.out.issues.append(Issue(kind, message, start, end))

    def stray_text(self, start: int, end: int) -> None:
        chunk = self.text[start:end]
        if chunk.strip():
            lead = len(chunk) - len(chunk.lstrip())
            trail = len(chunk.rstrip())
            preview = chunk.strip()[:40]
            self.issue(
                IssueKind.TEXT_OUTSIDE_TAGS,
                f"text outside tags: {preview!r}",
                start + lead,
                start + trail,
            )

    def close_block(
        self,
        kind: BlockKind,
        start: int,
        content_start: int,
        content_end: int,
        end: int,
        closed: bool,
    ) -> None:
        block = Block(
            kind,
            start,
            end,
            content_start,
            content_end,
            closed,
            self.text[content_start:content_end],
        )
        self.out.blocks.append(block)
        if not closed:
            self.issue(IssueKind.UNCLOSED_TAG, f"<{kind}> is never closed", start, content_end)
        if kind in ("tool_call", "tool_code"):
            self.tool_call(block)

    def tool_call(self, block: Block) -> None:
        source: Literal["tool_call", "tool_code"] = (
            "tool_call" if block.kind == "tool_call" else "tool_code"
        )
        body = block.content
        span = (block.start, block.end)
        if not body.strip():
            self.issue(IssueKind.EMPTY_TOOL_CALL, f"empty <{block.kind}>", *span)
            self.out.tool_calls.append(ToolCall(None, {}, block, source, error="empty tool call"))
            return
        if len(body) > MAX_CALL_CHARS:
            msg = f"tool call body of {len(body)} characters is too long to be a call"
            self.issue(IssueKind.INVALID_CALL, msg, *span)
            self.out.tool_calls.append(ToolCall(None, {}, block, source, error=msg))
            return
        name: Any
        arguments: Any
        try:
            if block.kind == "tool_call":
                try:
                    obj = json.loads(body)
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
                    arguments = json.loads(arguments) if arguments.strip() else {}
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
            args = model.model_validate(arguments, context=self.context)
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
) -> ParsedResponse:
    """Parse one model response. Never raises; linear time in `len(text)`.

    `tools` maps tool names to their argument models (default: `crop_video` -> `CropVideoArgs`);
    `max_num_frames` bounds `num_frames` of crop calls (default 16).

    Rules: a block is opened by its tag and closed by the matching closing tag. An opening tag of a
    *different* kind inside an open block closes that block implicitly (recorded as `unclosed_tag`);
    one of the *same* kind is `nested_tag` and ignored. A closing tag with no open block is
    `unexpected_close`. Non-blank text outside blocks is `text_outside_tags`. `answer` is the last
    closed answer block; more than one answer block is `multiple_answers`.
    """
    if not isinstance(text, str):
        text = str(text)
    context = {"max_num_frames": max_num_frames} if max_num_frames else {}
    b = _Builder(text, DEFAULT_TOOLS if tools is None else tools, context)
    tags = _find_tags(text)
    b.out.tags = tags
    open_kind: BlockKind | None = None
    open_start = content_start = 0
    cursor = 0  # end of the last consumed structure, for text-outside-tags detection
    for tag in tags:
        if tag.tag in OPEN_TAGS:
            kind = OPEN_TAGS[tag.tag]
            if open_kind is None:
                b.stray_text(cursor, tag.start)
            elif open_kind == kind:
                b.issue(IssueKind.NESTED_TAG, f"{tag.tag} inside <{kind}>", tag.start, tag.end)
                continue
            else:  # a different block starts: the open one was never closed
                b.close_block(open_kind, open_start, content_start, tag.start, tag.start, False)
            open_kind, open_start, content_start = kind, tag.start, tag.end
        else:
            kind = CLOSE_TAGS[tag.tag]
            if open_kind == kind:
                b.close_block(kind, open_start, content_start, tag.start, tag.end, True)
                open_kind = None
                cursor = tag.end
            else:
                where = f" inside <{open_kind}>" if open_kind else ""
                b.issue(
                    IssueKind.UNEXPECTED_CLOSE,
                    f"{tag.tag} without a matching <{kind}>{where}",
                    tag.start,
                    tag.end,
                )
                if open_kind is None:
                    b.stray_text(cursor, tag.start)
                    cursor = tag.end
    if open_kind is not None:
        b.close_block(open_kind, open_start, content_start, len(text), len(text), False)
    else:
        b.stray_text(cursor, len(text))

    answers = b.out.answer_blocks
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
    if answers and b.out.tool_calls:
        first_answer = answers[0].start
        late = [c for c in b.out.tool_calls if c.block.start > first_answer]
        if late:
            b.issue(
                IssueKind.CALL_AFTER_ANSWER,
                f"{len(late)} tool call(s) after the answer",
                late[0].block.start,
                late[-1].block.end,
            )
    b.out.issues.sort(key=lambda i: (i.start, i.end))
    return b.out
