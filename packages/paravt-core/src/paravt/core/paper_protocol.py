"""The released ParaVT evaluation driver's protocol: its strings (verbatim) and how it reads replies.

The paper's Table 1 numbers come from the released driver, `paravt/eval/driver.py` and
`paravt/eval/utils.py` of https://github.com/EvolvingLMMs-Lab/ParaVT (commit cf55249, "Initial
release"). The strings below are protocol facts copied verbatim from those files (each cites where);
everything else here is our code, written to read model replies the way the driver reads them (the
recorded fixtures of paravt-eval check both against the driver itself).

Copyright notice for the copied strings:

    Copyright the ParaVT authors (EvolvingLMMs-Lab/ParaVT).
    Licensed under the Apache License, Version 2.0 (the "License"); you may not use these strings
    except in compliance with the License. You may obtain a copy of the License at
    http://www.apache.org/licenses/LICENSE-2.0. Unless required by applicable law or agreed to in
    writing, software distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
    WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the License for the
    specific language governing permissions and limitations under the License.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

# ------------------------------------------------------------------------------------------------
# Verbatim strings. Source: EvolvingLMMs-Lab/ParaVT@cf55249 paravt/eval/driver.py unless noted.

# driver.py `TOOL_SCHEMA` (json.dumps of this dict, default separators).
PAPER_TOOL_SCHEMA = json.dumps(
    {
        "type": "function",
        "function": {
            "name": "crop_video",
            "description": "Analyze a cropped video segment by sampling frames from a specific time range.",
            "parameters": {
                "type": "object",
                "properties": {
                    "video_path": {"type": "string", "description": "Path to the video file"},
                    "start_time": {"type": "number", "description": "Start time in seconds"},
                    "end_time": {"type": "number", "description": "End time in seconds"},
                },
                "required": ["video_path", "start_time", "end_time"],
            },
        },
    }
)

# driver.py `DIRECT_SYSTEM`
PAPER_DIRECT_SYSTEM = (
    "You are a helpful video understanding assistant. Watch the video "
    "carefully and answer the question. Provide your final answer in "
    "<answer></answer> tags."
)

# driver.py `REASONING_SYSTEM`
PAPER_REASONING_SYSTEM = (
    "You are a helpful assistant. When the user asks a question, your "
    "response must include two parts: first, the reasoning process "
    "enclosed in <think>...</think> tags, then the final answer "
    "enclosed in <answer>...</answer> tags."
)

# driver.py `GENERAL_AGENTIC_SYSTEM` (a str.format template over `tool_schema`)
PAPER_GENERAL_AGENTIC_SYSTEM = """You are a video understanding agent that can analyze videos by cropping and examining specific segments.

Available tool:
<tools>
{tool_schema}
</tools>

For tool calls, return a JSON object within <tool_call></tool_call> XML tags:
<tool_call>
{{"name": "crop_video", "arguments": {{"video_path": "...", "start_time": 0, "end_time": 10}}}}
</tool_call>

You may emit **multiple <tool_call> blocks in one turn** to analyze different segments in parallel — this is more efficient than sequential calls and is the recommended dispatch shape for this agent.

Format strictly as:
<think>your reasoning here</think>
<tool_call>...</tool_call>  (zero or more, parallel if multiple)
<answer>your final answer</answer>

Always wrap your reasoning in <think> tags and your final answer in <answer> tags."""

# driver.py `MINIMAL_AGENTIC_SYSTEM` (a str.format template over `tool_schema`)
PAPER_MINIMAL_AGENTIC_SYSTEM = """# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{tool_schema}
</tools>

For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{{"name": <function-name>, "arguments": <args-json-object>}}
</tool_call>"""

# driver.py `eval_one`: the suffix added to the question in agentic modes.
PAPER_VIDEO_PATH_SUFFIX = " The video path for this video is: {video_name}"

# driver.py `eval_one`: the text after a crop's frames, and the text of a failed crop.
PAPER_TOOL_RESPONSE = (
    "<tool_response>\n{num_frames} frames from {start:.1f}s to {end:.1f}s.\n</tool_response>"
)
PAPER_TOOL_ERROR = "<tool_response>\n[Error cropping {start:.1f}s-{end:.1f}s]\n</tool_response>"

# driver.py `eval_one`: the forced-answer request after the last tool turn, and its max_tokens.
PAPER_FORCE_MCQ = "Based on the video and cropped segments above, answer with ONLY the letter."
PAPER_FORCE_GROUNDING = (
    "Based on the video and any cropped segments, provide your final answer "
    "about when the event happens. Use the format: "
    "'The event happens in the X.X - Y.Y seconds.'"
)
PAPER_FORCE_MCQ_MAX_TOKENS = 64
PAPER_FORCE_GROUNDING_MAX_TOKENS = 128
# driver.py `DEFAULT_MAX_TOKENS`
PAPER_MAX_TOKENS = 2048
# paravt/eval/scripts/reproduce_paravt_8b.sh: ParaVT-8B's Charades-STA run
# (`--datasets charades --prompt_mode agentic_minimal`); its six MCQ splits ran agentic_general.
PAPER_GROUNDING_PROMPT_MODE = "agentic_minimal"
# reproduce_paravt_8b.sh line 3: "Six MCQ benches via image_url; charades via video_url" (lines 16,
# 25: `--video_channel image_url` / `--video_channel video_url`): the server decodes Charades-STA.
PAPER_GROUNDING_CHANNEL = "video_url"

# utils.py `load_samples`: the MCQ question layout and its instruction (direct mode has its own).
PAPER_MCQ_TEMPLATE = "Question: {question}\nOptions:\n{options}\n{instruction}"
PAPER_MCQ_INSTRUCTION = "Answer with the option letter only."
PAPER_MCQ_INSTRUCTION_DIRECT = (
    "Think step by step, use crop_video if needed, then provide your "
    "answer in <answer>X</answer> tags where X is the option letter."
)
# utils.py `load_samples` ("videomme_wsub"): the subtitle prefix.
PAPER_SUBTITLE_PREFIX = "This video's subtitles are listed below:\n{subtitles}\n\n"
# utils.py `load_samples` ("charades"): the grounding question, over the caption.
PAPER_GROUNDING_TEMPLATE = (
    "Please find the visual event described by a sentence in the video, "
    "determining its starting and ending times. The format should be: "
    "'The event happens in the start time - end time'. "
    "For example, The event 'person turn a light on' happens in the 24.3 - 30.4 seconds. "
    'Now I will give you the textual sentence: "{caption}". '
    "Please return its start time and end time."
)

# ------------------------------------------------------------------------------------------------
# Reading replies as the driver does (our code; behaviour matched against the driver's functions by
# paravt-eval's recorded fixtures).

OPTION_LETTERS = "ABCDEFGHIJ"
_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
_TOOL_CODE = re.compile(r"<tool_code>\s*(.*?)\s*</tool_code>", re.DOTALL)
_CROP_CALL = re.compile(r"crop_video\s*\((.*)\)\s*", re.DOTALL)
_KWARG_SPLIT = re.compile(r",\s*(?=[a-zA-Z_]+\s*=)")


def driver_tool_calls(text: str) -> list[Any]:
    """The tool calls the driver finds in a reply, in its order: every `<tool_call>` body that is
    valid JSON (any JSON value; others are silently skipped), then every leaked
    `<tool_code>crop_video(k=v, ...)</tool_code>` with at least one `k=v` (values as floats when
    they parse, else strings with quotes stripped)."""
    calls: list[Any] = []
    for body in _TOOL_CALL.findall(text):
        try:
            calls.append(json.loads(body))
        except (ValueError, RecursionError):  # the driver skips any body json cannot load
            continue
    for body in _TOOL_CODE.findall(text):
        body = body.strip()
        if not body or body.startswith("<|im_end|>"):
            continue
        match = _CROP_CALL.match(body)
        if match is None:
            continue
        args: dict[str, Any] = {}
        for pair in _KWARG_SPLIT.split(match.group(1)):
            key, sep, value = pair.partition("=")
            if not sep:
                continue
            value = value.strip().strip("\"'")
            try:
                args[key.strip()] = float(value)
            except ValueError:
                args[key.strip()] = value
        if args:
            calls.append({"name": "crop_video", "arguments": args})
    return calls


def driver_time_s(value: Any) -> float:
    """Seconds as the driver reads an argument: numbers and numeric strings as floats (NaN and
    infinities included), `MM:SS` / `HH:MM:SS`, anything else 0.0."""
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(value)
    except (TypeError, ValueError):
        pass
    if isinstance(value, str) and ":" in value:
        fields = value.split(":")
        try:
            if len(fields) == 2:
                return float(fields[0]) * 60 + float(fields[1])
            if len(fields) == 3:
                return float(fields[0]) * 3600 + float(fields[1]) * 60 + float(fields[2])
        except ValueError:
            pass
    return 0.0


def driver_window(call: Any, missing_end_s: float = 10.0) -> tuple[float, float]:
    """(start, end) of one call as the driver reads it: `arguments.start_time` (alias `start`,
    default 0), `arguments.end_time` (alias `end`, default start + `missing_end_s`).

    Raises `TypeError` where the driver itself fails on the call (a JSON value that is not an
    object, or `arguments` that is not an object); the driver then errors the whole sample."""
    if not isinstance(call, dict):
        raise TypeError(f"tool call {str(call)[:80]!r} is not a JSON object")
    args = call.get("arguments", {})
    if not isinstance(args, dict):
        raise TypeError(f"tool call arguments {str(args)[:80]!r} are not a JSON object")
    start = driver_time_s(args.get("start_time", args.get("start", 0)))
    end_value = args.get("end_time", args.get("end", start + missing_end_s))
    return start, driver_time_s(end_value)


def driver_letter(text: str) -> str:
    """The option letter the driver extracts from a reply (`utils.extract_letter`'s rules):
    `<answer>` content first, then a lone letter, then `answer is/: X`, then the first standalone
    A-J, else the first character."""
    text = text.strip()
    tagged = re.search(r"<answer>(.*?)</answer>", text, re.DOTALL)
    if tagged:
        inner = tagged.group(1).strip()
        if len(inner) == 1 and inner in OPTION_LETTERS:
            return inner
        found = re.search(r"\b([A-J])\b", inner)
        if found:
            return found.group(1)
    if len(text) == 1 and text in OPTION_LETTERS:
        return text
    for pattern in (r"(?:answer|Answer)\s*(?:is|:)\s*([A-J])", r"\b([A-J])\b"):
        found = re.search(pattern, text)
        if found:
            return found.group(1)
    return text[:1]


_CLOCK_SPAN = re.compile(r"(\d+):(\d+(?:\.\d+)?)\s*[-–—]\s*(\d+):(\d+(?:\.\d+)?)")
_SECONDS_SPAN = re.compile(r"(\d+\.?\d*)\s*[-–—]\s*(\d+\.?\d*)")


def driver_span(text: str) -> list[float] | None:
    """The `[start, end]` the driver extracts from a grounding reply
    (`utils.extract_time_from_response`'s rules), or None."""
    if not text or not text.strip():
        return None
    tag = re.search(r"<time>([^<]+)</time>", text)
    candidates = ([tag.group(1)] if tag else []) + [text]
    for candidate in candidates:
        clock = _CLOCK_SPAN.search(candidate)
        if clock:
            start = int(clock.group(1)) * 60 + float(clock.group(2))
            end = int(clock.group(3)) * 60 + float(clock.group(4))
            if start < end < 3600:
                return [start, end]
        plain = _SECONDS_SPAN.search(candidate)
        if plain:
            start, end = float(plain.group(1)), float(plain.group(2))
            if end > start:
                return [start, end]
    starts = re.findall(
        r"(?:start(?:ing)?|begin(?:ning)?)\s*(?:time)?[:\s]*(\d+\.?\d*)", text, re.I
    )
    ends = re.findall(r"(?:end(?:ing)?|finish(?:ing)?)\s*(?:time)?[:\s]*(\d+\.?\d*)", text, re.I)
    if starts and ends:
        return [float(starts[0]), float(ends[0])]
    numbers = re.findall(r"(\d+\.?\d*)", text)
    if len(numbers) >= 2:
        return [float(numbers[0]), float(numbers[1])]
    return None


def driver_iou(prediction: list[float], truth: list[float]) -> float:
    """Temporal IoU as the driver computes it (union = hull of both windows)."""
    inter = max(0.0, min(prediction[1], truth[1]) - max(prediction[0], truth[0]))
    union = max(prediction[1], truth[1]) - min(prediction[0], truth[0])
    return inter / union if union > 0 else 0.0


def is_finite_window(start: float, end: float) -> bool:
    return math.isfinite(start) and math.isfinite(end)
