"""TRL: our `crop_video` tool inside `GRPOTrainer`'s own tool-calling loop.

TRL 1.16 runs tools itself (`trl/trainer/grpo_trainer.py`, `GRPOTrainer._tool_call_loop`): it
parses each generation with the tokenizer's response template (`trl.chat_template_utils.
parse_response`), calls every `{"type": "function", "function": {"name", "arguments"}}` in
`tool_calls` as `tool(**arguments)`, appends `{"role": "tool", "name", "content"}` and generates
again. A tool that raises becomes the tool message `{'error': '...'}` and counts in TRL's
`tools/failure_frequency`. A tool returning a list of content blocks is passed through whole, and
its `{"type": "image", "image": ...}` blocks are shown to a vision-language model (they join the
images of the next generation and of the loss's forward pass).

The tool must read the sample's own video, never a file the model names. TRL's
`environment_factory` gives every rollout its own environment instance: `reset(**row)` is called
with the dataset row before generation, and the instance's public methods other than `reset` and
`get_reward` are its tools (their schema comes from type hints and the Google-style docstring,
`transformers.utils.get_json_schema`). `CropVideoEnvironment` is that environment: `reset` binds
the row's video, `crop_video` is the tool. Pass `environment_factory=crop_video_environment()`.

`trl_video_row` turns a dataset row (`video`, `question`, `answer`, ...) into the row TRL trains
on: a conversational prompt with the overview frames (each after its timestamp) in `images`.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import ValidationError

from paravt.core import (
    CROP_VIDEO,
    DEFAULT_MAX_NUM_FRAMES,
    CropVideoArgs,
    ImagePart,
    TextPart,
    build_main_prompt,
    format_validation_error,
    tool_response_message,
)
from paravt.tools import VideoReader, default_reader
from paravt.train.integrations.agent import RowTask, to_pil

TRL_SYSTEM_PROMPT = (
    "You are a video assistant that can look closer at parts of a long video. You see a sparse "
    "overview of the video: a few frames, each preceded by its timestamp in seconds. Think first "
    "inside <think> </think>. If the overview is not enough, call crop_video on the time windows "
    "worth a closer look; several calls in one turn are all run, and each returns the window's "
    "frames with their timestamps. When you have enough evidence, give the final answer inside "
    "<answer> </answer>. For multiple choice, the answer is the option letter; for 'when' "
    "questions, [start, end] in seconds."
)


def _blocks(parts: list[Any]) -> tuple[list[dict[str, Any]], list[Any]]:
    """Our message parts as TRL content blocks, and the images in order."""
    blocks: list[dict[str, Any]] = []
    images: list[Any] = []
    for part in parts:
        if isinstance(part, ImagePart):
            image = to_pil(part.image)
            images.append(image)
            blocks.append({"type": "image", "image": image})
        elif isinstance(part, TextPart) and part.text:
            blocks.append({"type": "text", "text": part.text})
    return blocks, images


def _placeholder(block: dict[str, Any]) -> dict[str, Any]:
    """A prompt block as TRL takes it: images are `{"type": "image"}`, filled from `images`."""
    return {"type": "image"} if block["type"] == "image" else block


class CropVideoEnvironment:
    """One rollout's `crop_video` tool for `GRPOTrainer(environment_factory=...)`.

    `reset(**row)` binds the video named by the row's `video_column`; the model only chooses the
    window. Arguments are validated by `CropVideoArgs` (times in seconds, `MM:SS` or `HH:MM:SS`,
    `num_frames` bounded by `max_num_frames`); the window is then clamped to the video by the
    reader. Every clamp is a sentence in the returned text; an invalid call raises `ValueError`
    naming the argument, which TRL returns to the model as the tool's error.
    """

    def __init__(
        self,
        *,
        video_column: str = "video",
        max_num_frames: int = DEFAULT_MAX_NUM_FRAMES,
        reader: VideoReader | None = None,
    ) -> None:
        self._video_column = video_column
        self._max_num_frames = max_num_frames
        self._reader = reader
        self._video: str | None = None

    def reset(self, **row: Any) -> None:
        """Bind the row's video (TRL calls this with the dataset row before each rollout)."""
        video = row.get(self._video_column)
        if not video:
            raise KeyError(
                f"crop_video needs the dataset column {self._video_column!r} naming the sample's "
                f"video (row columns: {sorted(row)})"
            )
        self._video = os.fspath(video)
        return None  # the prompt already holds the overview; nothing is appended

    def crop_video(
        self, start_time: float, end_time: float, num_frames: int | None = None
    ) -> list[dict[str, Any]]:
        """Crop a time window of the video and look at its frames closely.

        Several calls in one turn are all run; each returns its window's frames, each preceded
        by its timestamp.

        Args:
            start_time: Start of the window in seconds from the beginning of the video.
            end_time: End of the window in seconds; must be after start_time.
            num_frames: Optional number of frames to sample from the window (bounded by the tool).
        """
        if self._video is None:
            raise RuntimeError("crop_video was called before reset() bound a video")
        raw: dict[str, Any] = {"start_time": start_time, "end_time": end_time}
        if num_frames is not None:
            raw["num_frames"] = num_frames
        try:
            args = CropVideoArgs.model_validate(
                raw, context={"max_num_frames": self._max_num_frames}
            )
        except ValidationError as exc:
            raise ValueError(format_validation_error(CROP_VIDEO, exc)) from None
        reader = self._reader or default_reader()
        (output,) = reader.crop(self._video, [args])
        if output.error is not None:
            raise ValueError(output.error)
        blocks, _ = _blocks(tool_response_message(output).parts)
        return blocks


def crop_video_environment(
    *,
    video_column: str = "video",
    max_num_frames: int = DEFAULT_MAX_NUM_FRAMES,
    reader: VideoReader | None = None,
) -> Callable[[], CropVideoEnvironment]:
    """The `environment_factory` for `GRPOTrainer`: a new `CropVideoEnvironment` per call."""
    return functools.partial(
        CropVideoEnvironment,
        video_column=video_column,
        max_num_frames=max_num_frames,
        reader=reader,
    )


def trl_video_row(
    row: Mapping[str, Any],
    *,
    overview_frames: int = 16,
    system: str = TRL_SYSTEM_PROMPT,
    reader: VideoReader | None = None,
) -> dict[str, Any]:
    """A TRL training row from a ParaVT row (`video`, `question`, `answer`, optionally
    `question_type`, `options`; see `RowTask.from_row`).

    `prompt` is the system prompt and a user turn with the video's length, `overview_frames`
    frames each after its `<t seconds>` timestamp, and the question with its options; `images`
    holds the frames (PIL) in order. `video`, `answer`, `question_type` and `options` stay
    columns: the environment reads `video`, the reward functions the rest. The tool schema is
    not in `system`: TRL's chat template renders it from the tool.
    """
    task = RowTask.from_row(row)
    reader = reader or default_reader()
    info = reader.probe(task.video)
    overview = reader.overview(task.video, overview_frames)
    _, user = build_main_prompt(
        task.question,
        overview,
        mode="agentic_minimal",
        options=task.options,
        duration_s=float(info.duration_s),
    )
    content, images = _blocks(user.parts)
    return {
        "prompt": [
            # content as blocks in both messages: a dataset column holds one type
            {"role": "system", "content": [{"type": "text", "text": system}]},
            {"role": "user", "content": [_placeholder(b) for b in content]},
        ],
        "images": images,
        "video": task.video,
        "answer": task.answer,
        "question_type": task.question_type,
        "options": list(task.options) if task.options else None,
    }
