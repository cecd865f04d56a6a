"""The tool protocol: `crop_video` arguments, tool calls, frames, chat messages and tool outputs.

Everything the model controls passes through `CropVideoArgs` before anything is executed: times are
finite, non-negative and ordered, `num_frames` is bounded. Every bound is either an error naming the
argument and its allowed range, or a clamp stated in words (`CropVideoArgs.clamps`, carried into
the tool's response and the call's trace). The model never chooses which file is read: a
`video_path` argument (present in the schema of released checkpoints) is accepted and ignored.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema

CROP_VIDEO = "crop_video"
DEFAULT_MAX_NUM_FRAMES = 16
# A timestamp string is at most HH:MM:SS.fff; anything longer is not a time.
_MAX_TIME_TEXT = 32
_CLOCK = re.compile(r"(?:(\d{1,3}):)?(\d{1,2}):(\d{1,2}(?:\.\d+)?)")


def parse_time_s(value: Any, *, field_name: str = "time") -> float:
    """Seconds from a number, a numeric string (`"12.5"`, `"12.5s"`) or a clock (`MM:SS`, `HH:MM:SS`).

    Raises `ValueError` naming `field_name` for anything else, NaN, infinities and negatives.
    """
    if isinstance(value, bool):
        raise ValueError(f"{field_name} must be a number of seconds, not a boolean")
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip().lower()
        if len(text) > _MAX_TIME_TEXT:
            raise ValueError(
                f"{field_name} is not a time (at most {_MAX_TIME_TEXT} characters): "
                f"{value[:_MAX_TIME_TEXT]!r}..."
            )
        for suffix in ("seconds", "second", "secs", "sec", "s"):
            if text.endswith(suffix):
                text = text[: -len(suffix)].strip()
                break
        clock = _CLOCK.fullmatch(text)
        if clock:
            hours, minutes, secs = clock.groups()
            if float(secs) >= 60 or (hours is not None and int(minutes) >= 60):
                raise ValueError(
                    f"{field_name} {value!r} is not a valid clock time (minutes and seconds "
                    "must be below 60)"
                )
            seconds = int(hours or 0) * 3600 + int(minutes) * 60 + float(secs)
        else:
            try:
                seconds = float(text)
            except ValueError:
                raise ValueError(
                    f"{field_name} must be seconds (e.g. 12.5) or MM:SS / HH:MM:SS, got {value!r}"
                ) from None
    else:
        raise ValueError(f"{field_name} must be a number of seconds, got {type(value).__name__}")
    if math.isnan(seconds) or math.isinf(seconds):
        raise ValueError(f"{field_name} must be a finite number of seconds >= 0, got {value!r}")
    if seconds < 0:
        raise ValueError(f"{field_name} must be >= 0 s (seconds from the start), got {value!r}")
    return seconds


class CropVideoArgs(BaseModel):
    """Arguments of one `crop_video` call: a time window of the sample's own video, in seconds.

    Validate with `CropVideoArgs.model_validate(args, context={"max_num_frames": N})` to bound
    `num_frames` by a configured maximum (default 16). A larger request is clamped to it and the
    clamp is stated in `clamps`; `num_frames` below 1 is an error naming the allowed range.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    start_time: float = Field(
        description="Start of the window in seconds from the beginning of the video "
        "(numbers, numeric strings, MM:SS and HH:MM:SS are accepted)."
    )
    end_time: float = Field(description="End of the window in seconds; must be after start_time.")
    num_frames: int | None = Field(
        default=None,
        ge=1,
        description="Optional number of frames to sample from the window (bounded by the tool).",
    )
    video_path: str | None = Field(
        default=None,
        exclude=True,
        description="Ignored. Accepted for released checkpoints; the runtime owns the video.",
    )
    # Set by validation only (never an argument): the num_frames asked for when it was clamped.
    requested_num_frames: SkipJsonSchema[int | None] = Field(default=None, exclude=True, repr=False)

    # One Python validator for the whole call (each validator crossing into Python costs about
    # as much as the rest of validation; the parser validates every call of every rollout).
    @model_validator(mode="before")
    @classmethod
    def _arguments(cls, data: Any, info: ValidationInfo) -> Any:
        if not isinstance(data, dict):
            return data  # pydantic names the wrong type
        start, end = data.get("start_time"), data.get("end_time")
        if (
            len(data) == 2
            and (type(start) is int or type(start) is float)
            and (type(end) is int or type(end) is float)
            and 0 <= start < end < math.inf
        ):
            return data  # the common call: two plain, ordered, finite, non-negative numbers
        if "requested_num_frames" in data:
            raise ValueError("requested_num_frames is not an argument (it is set by validation)")
        data = dict(data)
        for key in ("start_time", "end_time"):
            if key in data:
                data[key] = parse_time_s(data[key], field_name=key)
        start, end = data.get("start_time"), data.get("end_time")
        if start is not None and end is not None and start >= end:
            raise ValueError(f"end_time ({end:g} s) must be greater than start_time ({start:g} s)")
        if data.get("num_frames") is not None:
            count = _frame_count(data["num_frames"], info)
            limit = _frame_limit(info)
            if isinstance(count, int) and count > limit:
                data["requested_num_frames"] = count
                count = limit
            data["num_frames"] = count
        if "video_path" in data:
            data["video_path"] = None  # never trusted, never used
        return data

    @property
    def duration_s(self) -> float:
        return self.end_time - self.start_time

    @property
    def clamps(self) -> tuple[str, ...]:
        """What validation changed in the request, one sentence each (empty when nothing was)."""
        requested = self.requested_num_frames
        if requested is None or self.num_frames is None:
            return ()
        return (
            f"num_frames {_count_text(requested)} is above the limit of {self.num_frames} frames "
            f"per call; clamped to {self.num_frames}.",
        )


def _frame_count(value: Any, info: ValidationInfo) -> Any:
    """`num_frames` as an int: whole floats and digit strings convert; below 1 is an error."""
    allowed = f"allowed: 1 to {_frame_limit(info)}"
    if isinstance(value, bool):
        raise ValueError(f"num_frames must be a whole number of frames ({allowed}), not a boolean")
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError(f"num_frames must be a whole number ({allowed}), got {value!r}")
        value = int(value)
    elif isinstance(value, str) and value.strip().lstrip("+-").isdigit() and len(value) < 10:
        value = int(value)
    if isinstance(value, int) and value < 1:
        raise ValueError(f"num_frames must be at least 1 ({allowed}), got {value}")
    return value  # anything else: pydantic reports it is not an integer


def _frame_limit(info: ValidationInfo) -> int:
    """The `max_num_frames` of the validation context (default 16)."""
    if isinstance(info.context, dict):
        limit = info.context.get("max_num_frames")
        if isinstance(limit, int) and limit >= 1:
            return limit
    return DEFAULT_MAX_NUM_FRAMES


def _count_text(n: int) -> str:
    """A count as text, short even for a 4000-digit number from hostile JSON."""
    return str(n) if n < 10**12 else f"{n:.3e}"


def format_validation_error(tool: str, error: ValidationError) -> str:
    """One line naming each offending argument: `crop_video: end_time: must be finite ...`."""
    parts = []
    for item in error.errors(include_url=False):
        loc = ".".join(str(x) for x in item.get("loc", ()))
        msg = str(item.get("msg", "invalid")).removeprefix("Value error, ")
        if item.get("type") == "extra_forbidden":
            msg = "unknown argument (expected start_time, end_time, num_frames)"
        # errors of the whole call already start with the argument they are about
        parts.append(f"{loc}: {msg}" if loc else msg)
    return f"{tool}: " + "; ".join(parts)


def crop_video_schema(*, include_video_path: bool = False) -> dict[str, Any]:
    """The OpenAI-style function schema of `crop_video`, generated from `CropVideoArgs`.

    `include_video_path=True` adds the (ignored) `video_path` string that released checkpoints were
    trained to emit, so their prompts match what they saw in training.
    """
    schema = CropVideoArgs.model_json_schema()
    props: dict[str, Any] = {}
    for name in ("start_time", "end_time", "num_frames"):
        prop = dict(schema["properties"][name])
        prop.pop("title", None)
        if name == "num_frames":
            prop.pop("anyOf", None)
            prop.pop("default", None)
            prop.update(type="integer", minimum=1)
        else:
            prop["type"] = "number"
        props[name] = prop
    if include_video_path:
        props = {"video_path": {"type": "string", "description": "Path of the video."}, **props}
    return {
        "type": "function",
        "function": {
            "name": CROP_VIDEO,
            "description": "Crop a time window of the video and look at its frames closely. "
            "Several calls in one turn run in parallel.",
            "parameters": {
                "type": "object",
                "properties": props,
                "required": [
                    *(["video_path"] if include_video_path else []),
                    "start_time",
                    "end_time",
                ],
            },
        },
    }


def crop_video_schema_json(*, include_video_path: bool = False) -> str:
    return json.dumps(crop_video_schema(include_video_path=include_video_path), indent=2)


# --------------------------------------------------------------------------------------------------
# Frames, messages and tool outputs. Images are opaque here (numpy arrays, torch tensors or PIL
# images): paravt-core never imports torch or decodes video.


@dataclass(frozen=True)
class Frame:
    """One frame of a video with its absolute timestamp in seconds."""

    image: Any
    timestamp_s: float


@dataclass(frozen=True)
class TextPart:
    text: str
    type: Literal["text"] = "text"


@dataclass(frozen=True)
class ImagePart:
    image: Any
    type: Literal["image"] = "image"


Part = TextPart | ImagePart
Role = Literal["system", "user", "assistant", "tool"]


@dataclass
class Message:
    """A chat message; `content` is text or a list of text and image parts in order."""

    role: Role
    content: str | list[Part]

    @property
    def parts(self) -> list[Part]:
        return [TextPart(self.content)] if isinstance(self.content, str) else list(self.content)

    @property
    def text(self) -> str:
        return "".join(p.text for p in self.parts if isinstance(p, TextPart))

    @property
    def images(self) -> list[Any]:
        return [p.image for p in self.parts if isinstance(p, ImagePart)]


def content_text(content: Any) -> str:
    """The text of a chat message's `content` in the OpenAI form that datasets and frameworks
    hand over: a string, or the `text` of each part of a part list joined (image and video parts
    give none); anything else has no text. A part whose `text` is missing or null gives none: a
    table's struct column (a parquet file, a Hugging Face dataset) gives every part every field,
    so a video part reads `{"type": "video", "video": "a.mp4", "text": None}`."""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "".join(
            p["text"] for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str)
        )
    return ""


@dataclass
class ToolOutput:
    """What one tool call returned: frames and a short note, or an error naming the problem.

    `clamps` lists every change the tool (or argument validation) made to the request, one
    sentence each; each is also part of `text`, so the model reads it in the tool response."""

    text: str = ""
    frames: list[Frame] = field(default_factory=list)
    error: str | None = None
    window_s: tuple[float, float] | None = None  # the window actually read, after clamping
    clamps: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.error is None

    @classmethod
    def failure(cls, message: str) -> ToolOutput:
        return cls(error=message)
