"""Prompt builders: the main agent's first prompt in four modes, the sub-agent prompt, tool responses.

Every frame shown to a model is preceded by its absolute timestamp as text (`<12.5 seconds>`), so the
model can name times it saw and ask for windows around them.

Modes:
- `direct`: answer at once, inside `<answer>`.
- `reasoning`: `<think>` then `<answer>`, no tools.
- `agentic_general`: the full tool instructions with the `crop_video` schema and the parallel-call
  format (what ParaVT is trained and evaluated with).
- `agentic_minimal`: the schema and a one-line instruction, for models that already know the format.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Literal

from paravt.core.protocol import (
    CROP_VIDEO,
    Frame,
    ImagePart,
    Message,
    Part,
    TextPart,
    ToolOutput,
    crop_video_schema,
)

PromptMode = Literal["direct", "reasoning", "agentic_general", "agentic_minimal"]
PROMPT_MODES: tuple[PromptMode, ...] = ("direct", "reasoning", "agentic_general", "agentic_minimal")
THINK_PREFIX = "<think>\n"
OPTION_LETTERS = "ABCDEFGHIJ"

_DIRECT = (
    "You are a video assistant. Watch the frames, each preceded by its timestamp, and answer the "
    "question. Reply with only <answer>your answer</answer>. For multiple choice, the answer is the "
    "option letter."
)
_REASONING = (
    "You are a video assistant. Watch the frames, each preceded by its timestamp. First think step "
    "by step inside <think> </think>, then give the final answer inside <answer> </answer>. For "
    "multiple choice, the answer is the option letter."
)
_AGENTIC_GENERAL = """You are a video assistant that can look closer at parts of a long video.
You see a sparse overview of the video: a few frames, each preceded by its timestamp in seconds.
You have one tool:
<tools>
{schema}
</tools>
How to work:
1. Think first inside <think> </think>: what does the question need, and where in the video could it be?
2. If the overview is not enough, call crop_video on the time windows worth a closer look. You may
   make several calls in the same turn; they run in parallel. Each call is one block:
   <tool_call>{{"name": "crop_video", "arguments": {{"start_time": 10.0, "end_time": 20.0}}}}</tool_call>
   Each window is examined by a helper who reports what it sees inside <tool_response> </tool_response>.
3. When you have enough evidence, think again and give the final answer inside <answer> </answer>.
   For multiple choice, the answer is the option letter; for "when" questions, [start, end] in seconds.
You have at most {max_turns} turns and {max_parallel} calls per turn."""
_AGENTIC_MINIMAL = """You may call this tool, several times in one turn:
<tools>
{schema}
</tools>
Format: <think>...</think>, then optional <tool_call>{{"name": "crop_video", "arguments": {{...}}}}</tool_call> blocks, then <answer>...</answer>."""
_SUBAGENT = (
    "You are a helper of a video assistant. You see frames cropped from {start:.1f} s to {end:.1f} s "
    "of a video, each preceded by its timestamp. Describe briefly and factually what you see that "
    "helps answer the question, and when it happens. Reply inside <answer> </answer>."
)
FINAL_ANSWER_NOTE = (
    "You have used all your tool turns. Do not call tools again: give the final answer now inside "
    "<answer> </answer>."
)


def timestamp_text(seconds: float) -> str:
    return f"<{seconds:.1f} seconds>"


def render_frames(frames: Sequence[Frame]) -> list[Part]:
    """Interleave `<t seconds>` text and images, in order."""
    parts: list[Part] = []
    for frame in frames:
        parts.append(TextPart(timestamp_text(frame.timestamp_s)))
        parts.append(ImagePart(frame.image))
    return parts


def format_question(question: str, options: Sequence[str] | None = None) -> str:
    if not options:
        return question
    lines = [question.rstrip()]
    for letter, option in zip(OPTION_LETTERS, options):
        lines.append(f"{letter}. {option}")
    return "\n".join(lines)


def system_prompt(
    mode: PromptMode,
    *,
    max_turns: int = 3,
    max_parallel: int = 5,
    include_video_path: bool = False,
) -> str:
    if mode not in PROMPT_MODES:
        raise ValueError(f"prompt mode {mode!r} is not one of {', '.join(PROMPT_MODES)}")
    if mode == "direct":
        return _DIRECT
    if mode == "reasoning":
        return _REASONING
    schema = json.dumps(crop_video_schema(include_video_path=include_video_path))
    template = _AGENTIC_GENERAL if mode == "agentic_general" else _AGENTIC_MINIMAL
    return template.format(schema=schema, max_turns=max_turns, max_parallel=max_parallel)


def build_main_prompt(
    question: str,
    overview: Sequence[Frame],
    *,
    mode: PromptMode = "agentic_general",
    options: Sequence[str] | None = None,
    duration_s: float | None = None,
    max_turns: int = 3,
    max_parallel: int = 5,
    include_video_path: bool = False,
) -> list[Message]:
    """The main agent's first prompt: system instructions, then the overview frames and question."""
    intro = f"The video is {duration_s:.1f} seconds long. " if duration_s is not None else ""
    intro += f"Overview ({len(overview)} frames):"
    content: list[Part] = [TextPart(intro), *render_frames(overview)]
    content.append(TextPart("Question: " + format_question(question, options)))
    return [
        Message(
            "system",
            system_prompt(
                mode,
                max_turns=max_turns,
                max_parallel=max_parallel,
                include_video_path=include_video_path,
            ),
        ),
        Message("user", content),
    ]


def build_subagent_prompt(
    question: str, window_s: tuple[float, float], frames: Sequence[Frame]
) -> list[Message]:
    """A sub-agent's prompt: the cropped frames with their timestamps and the main question."""
    start, end = window_s
    return [
        Message("system", _SUBAGENT.format(start=start, end=end)),
        Message("user", [*render_frames(frames), TextPart("Question: " + question)]),
    ]


def window_text(output: ToolOutput) -> str:
    if output.window_s is None:
        return ""
    return f"[{output.window_s[0]:.1f} s - {output.window_s[1]:.1f} s] "


def tool_response_message(output: ToolOutput, *, summary: str | None = None) -> Message:
    """The `tool` message for one call.

    With `summary` (sub-agent mode) the message is text only; otherwise (frames mode) the frames
    themselves follow the tool's note, each with its timestamp. Errors are stated as errors.
    """
    if output.error is not None:
        return Message("tool", f"{CROP_VIDEO} error: {output.error}")
    head = window_text(output) + (output.text or "")
    if summary is not None:
        return Message("tool", (head + "\n" if head else "") + summary.strip())
    return Message("tool", [TextPart(head), *render_frames(output.frames)])
