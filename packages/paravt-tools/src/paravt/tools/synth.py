"""Synthetic long-video tasks where the tool is needed when the overview is sparse.

Each video is a slowly changing, low-saturation background with one easy-to-see **cue** (a
checkerboard for a few seconds) followed shortly by the **needle**: a large coloured square shown for
about 2 s. Distractor squares of other colours appear elsewhere. Questions:

- `mcq`: "What colour is the shape that appears shortly after the checkerboard?" with the four
  colours as options in a fixed order (A. red, B. green, C. blue, D. yellow); answer: a letter.
- `oe`: the same question answered with the colour word.
- `tvg`: "When does the shape that follows the checkerboard appear?"; answer `[start, end]` seconds.

A tiny model learns colour words and a fixed option order quickly, not per-sample shuffled letters
(ENVIRONMENT.md), and a short crop shows the needle while a sparse overview usually misses it.

`layout="single"` is the family built for learning on a CPU: one coloured square and nothing
else, asked as "What colour is the square?". At a small overview K the overview usually misses the
square; at K >= duration / needle_s it always shows it. The teacher crops the whole video in
`crop_windows` equal windows in parallel, each window's crop (`crop_max_frames` frames) always
catches the square when `needle_s` >= the crop's frame spacing, and the sub-agents answer in a few
words ("red square" / "no square"). `tool_fraction` < 1 makes some main-agent teacher traces
answer from the overview alone (right when the overview shows the square, a seeded guess
otherwise), so a short SFT gives a policy that calls the tool on only some prompts: the setting in
which RL has something to learn (the tool is what makes the answer findable).

Videos are rendered and encoded in chunks (`torchcodec.encoders.Encoder`), so a 30-minute video
never holds all its frames in memory. Everything is deterministic given the seed.
"""

from __future__ import annotations

import json
import math
import os
import time
import zlib
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from paravt.core import (
    CROP_VIDEO,
    OPTION_LETTERS,
    CropVideoArgs,
    Message,
    ToolOutput,
    build_main_prompt,
    build_subagent_prompt,
    format_question,
    system_prompt,
    tool_response_message,
)
from paravt.tools.crop import default_reader
from paravt.tools.sampling import crop_sample, overview_sample

if TYPE_CHECKING:
    from paravt.tools.crop import VideoReader

QuestionType = Literal["mcq", "oe", "tvg"]
Layout = Literal["cue", "single"]
COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (225, 30, 30),
    "green": (30, 190, 50),
    "blue": (30, 70, 230),
    "yellow": (235, 215, 30),
}
OPTIONS: tuple[str, ...] = tuple(COLOURS)  # fixed option order: A red, B green, C blue, D yellow
DATA_SOURCE = "paravt-synth"
RL_FILE = "rl.parquet"
SFT_FILE = "sft.parquet"
VIDEO_DIR = "videos"
MCQ_QUESTION = "What colour is the shape that appears shortly after the checkerboard?"
OE_QUESTION = (
    "What colour is the shape that appears shortly after the checkerboard? Answer with one word."
)
TVG_QUESTION = (
    "When does the coloured shape that follows the checkerboard appear? "
    "Answer with [start, end] in seconds."
)
# The `single` layout: one square, nothing to relate it to.
SINGLE_MCQ_QUESTION = "What colour is the square?"
SINGLE_OE_QUESTION = "What colour is the square? Answer with one word."
SINGLE_TVG_QUESTION = "When does the coloured square appear? Answer with [start, end] in seconds."


class SynthConfig(BaseModel):
    """Knobs of the synthetic task family (defaults: 2-minute, 128x96, 4 fps videos)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    duration_s: float = Field(120.0, gt=0, le=4 * 3600, description="Length of each video.")
    fps: float = Field(4.0, ge=1.0, le=60.0, description="Frame rate of the encoded videos.")
    width: int = Field(128, ge=32, le=1920, multiple_of=2, description="Frame width (even).")
    height: int = Field(96, ge=32, le=1080, multiple_of=2, description="Frame height (even).")
    num_needles: int = Field(3, ge=1, le=64, description="Coloured squares per video (1 target).")
    needle_s: float = Field(2.0, gt=0, le=10, description="How long a square is on screen.")
    square_size: tuple[float, float] = Field(
        (0.4, 0.8),
        description="Side of a square as a fraction of the frame's shorter side (range).",
    )
    cue_s: float = Field(6.0, gt=0, le=30, description="How long the checkerboard is on screen.")
    max_gap_s: float = Field(3.0, ge=0.5, le=10, description="Largest cue end -> needle gap.")
    question_types: tuple[QuestionType, ...] = Field(
        ("mcq", "oe", "tvg"), min_length=1, description="One RL row per video and type."
    )
    sft_overview_frames: int = Field(
        32, ge=1, le=256, description="Overview frames (K) of the main-agent teacher traces."
    )
    crop_fps: float = Field(1.0, gt=0, description="Crop sampling rate the sub-agent sees.")
    crop_max_frames: int = Field(
        4,
        ge=1,
        description="Frame cap of one teacher crop; match the trainer's video.max_crop_frames (4 "
        "in paravt-train's tiny recipes), or traces describe frames the model is not shown.",
    )
    chunk_frames: int = Field(256, ge=8, description="Frames rendered and encoded at once.")
    crf: int = Field(20, ge=0, le=51, description="libx264 quality.")
    layout: Layout = Field(
        "cue",
        description="'cue': a checkerboard cue, the target square after it and distractors; "
        "'single': one square only (the CPU-learnable family; num_needles and cue_s unused).",
    )
    crop_windows: int = Field(
        2,
        ge=1,
        le=16,
        description="'single' layout: the teacher crops the video in this many equal windows, "
        "all in one turn (parallel calls).",
    )
    tool_fraction: float = Field(
        1.0,
        ge=0.0,
        le=1.0,
        description="Fraction of main-agent teacher traces that call crop_video; the others "
        "answer from the overview alone (seeded per video and question type).",
    )
    prompt_mode: Literal["agentic_general", "agentic_minimal"] = Field(
        "agentic_general",
        description="System prompt of the main-agent teacher traces (paravt.core.prompts); "
        "match the RL recipe's rollout.prompt_mode.",
    )

    @model_validator(mode="after")
    def _fits(self) -> SynthConfig:
        lo, hi = self.square_size
        if not 0.0 < lo <= hi <= 1.0:
            raise ValueError(f"square_size {self.square_size} must satisfy 0 < low <= high <= 1")
        if self.layout == "single":
            need = self.needle_s + 2.0
            if self.duration_s < need:
                raise ValueError(
                    f"duration_s {self.duration_s:g} is too short for layout 'single'; need at "
                    f"least {need:g} s (needle_s + 2)"
                )
            return self
        need = self.cue_s + self.max_gap_s + self.needle_s + 4.0
        if self.duration_s < need:
            raise ValueError(
                f"duration_s {self.duration_s:g} is too short; need at least {need:g} s"
            )
        return self


@dataclass(frozen=True)
class Event:
    """Something on screen from `start_s` (inclusive) to `end_s` (exclusive)."""

    kind: Literal["cue", "needle"]
    start_s: float
    end_s: float
    colour: str | None = None
    box: tuple[int, int, int, int] | None = None  # x0, y0, x1, y1 of a square

    def active(self, t: float) -> bool:
        return self.start_s <= t < self.end_s


@dataclass(frozen=True)
class VideoSpec:
    """One synthetic video: its frame grid, background and events. `target` follows the cue."""

    video_id: str
    duration_s: float
    fps: float
    width: int
    height: int
    num_frames: int
    cue: Event
    target: Event
    distractors: tuple[Event, ...]
    background: tuple[float, ...]  # tint r, g, b, level period, level phase, wave period
    begin_s: float = 0.0
    layout: Layout = "cue"  # 'single': the cue is never shown (`cue` is an empty event)

    @property
    def needles(self) -> tuple[Event, ...]:
        return (self.target, *self.distractors)

    def frame_time_s(self, index: int) -> float:
        return index / self.fps

    def visible_at(self, t: float) -> list[Event]:
        return [e for e in (self.cue, *self.needles) if e.active(t)]

    def target_visible(self, timestamps: Sequence[float]) -> bool:
        """Whether any of the frames at `timestamps` shows the target square."""
        return any(self.target.active(t) for t in timestamps)


def _snap(t: float, fps: float) -> float:
    """Times on the frame grid, so an event covers whole frames."""
    return round(t * fps) / fps


def _background(rng: np.random.Generator) -> tuple[float, ...]:
    tint = rng.uniform(-0.12, 0.12, size=3)
    return (
        *(float(x) for x in tint),
        float(rng.uniform(40, 90)),
        float(rng.uniform(0, 2 * math.pi)),
        float(rng.uniform(20, 60)),
    )


def plan_video(config: SynthConfig, seed: int, index: int) -> VideoSpec:
    """The events and background of video `index` for `seed` (pure; no rendering)."""
    rng = np.random.default_rng([seed, index])
    d, fps = config.duration_s, config.fps
    num_frames = math.floor(d * fps)
    side = min(config.width, config.height)

    def square() -> tuple[int, int, int, int]:
        s = max(1, min(side, int(rng.uniform(*config.square_size) * side)))
        x0 = int(rng.integers(0, config.width - s + 1))
        y0 = int(rng.integers(0, config.height - s + 1))
        return x0, y0, x0 + s, y0 + s

    if config.layout == "single":
        colour = OPTIONS[int(rng.integers(len(OPTIONS)))]
        t0 = _snap(rng.uniform(0.5, d - config.needle_s - 0.5), fps)
        target = Event("needle", t0, _snap(t0 + config.needle_s, fps), colour, square())
        return VideoSpec(
            video_id=f"synth_{seed:04d}_{index:05d}",
            duration_s=num_frames / fps,
            fps=fps,
            width=config.width,
            height=config.height,
            num_frames=num_frames,
            cue=Event("cue", 0.0, 0.0),  # never active
            target=target,
            distractors=(),
            background=_background(rng),
            layout="single",
        )

    span = config.cue_s + config.max_gap_s + config.needle_s
    cue_start = _snap(rng.uniform(0.05 * d, max(0.05 * d, d - span - 2.0)), fps)
    cue = Event("cue", cue_start, _snap(cue_start + config.cue_s, fps))
    gap = _snap(rng.uniform(0.5, config.max_gap_s), fps)
    colour = OPTIONS[int(rng.integers(len(OPTIONS)))]
    t0 = cue.end_s + gap
    target = Event("needle", t0, _snap(t0 + config.needle_s, fps), colour, square())
    # Distractors: other colours, far (>= 8 s) from the cue-target span and from each other.
    busy = [(cue.start_s - 8.0, target.end_s + 8.0)]
    distractors: list[Event] = []
    others = [c for c in OPTIONS if c != colour]
    for _ in range(config.num_needles - 1):
        for _attempt in range(50):
            s = _snap(rng.uniform(1.0, d - config.needle_s - 1.0), fps)
            e = _snap(s + config.needle_s, fps)
            if all(e + 8.0 <= a or s - 8.0 >= b for a, b in busy):
                c = others[int(rng.integers(len(others)))]
                distractors.append(Event("needle", s, e, c, square()))
                busy.append((s, e))
                break
    distractors.sort(key=lambda ev: ev.start_s)
    background = _background(rng)
    return VideoSpec(
        video_id=f"synth_{seed:04d}_{index:05d}",
        duration_s=num_frames / fps,
        fps=fps,
        width=config.width,
        height=config.height,
        num_frames=num_frames,
        cue=cue,
        target=target,
        distractors=tuple(distractors),
        background=background,
    )


def render_frames(spec: VideoSpec, start: int, count: int) -> np.ndarray:
    """Frames `start .. start+count-1` of `spec` as uint8 `(T, 3, H, W)` (RGB)."""
    count = max(0, min(count, spec.num_frames - start))
    h, w = spec.height, spec.width
    t = (start + np.arange(count, dtype=np.float32)) / spec.fps
    tr, tg, tb, period, phase, wave = spec.background
    level = 115.0 + 35.0 * np.sin(2 * np.pi * t / period + phase)  # (T,)
    x = np.arange(w, dtype=np.float32) / w
    y = np.arange(h, dtype=np.float32)[:, None] / h
    ripple = 18.0 * np.sin(2 * np.pi * (x[None, None, :] + 0.5 * y[None] + t[:, None, None] / wave))
    grey = level[:, None, None] + ripple  # (T, H, W): slowly drifting, low contrast
    tint = np.asarray([tr, tg, tb], dtype=np.float32)
    frames = grey[:, None] * (1.0 + tint[None, :, None, None])  # low saturation
    out = np.clip(frames, 0, 255).astype(np.uint8)
    cell = max(4, min(h, w) // 6)
    checker = ((np.arange(h)[:, None] // cell + np.arange(w)[None, :] // cell) % 2 * 255).astype(
        np.uint8
    )
    for k in range(count):
        for event in spec.visible_at(float(t[k])):
            if event.kind == "cue":
                out[k] = checker[None]
            elif event.box is not None and event.colour is not None:
                x0, y0, x1, y1 = event.box
                out[k, :, y0:y1, x0:x1] = np.asarray(COLOURS[event.colour], np.uint8)[:, None, None]
    return out


def write_video(
    spec: VideoSpec, path: str | os.PathLike[str], *, chunk_frames: int = 256, crf: int = 20
) -> None:
    """Encode `spec` to an H.264 mp4 at `path`, rendering `chunk_frames` frames at a time.

    One keyframe per second keeps random access (cropping) cheap.
    """
    import torch
    from torchcodec.encoders import Encoder

    encoder = Encoder()
    stream = encoder.add_video(
        height=spec.height,
        width=spec.width,
        frame_rate=spec.fps,
        codec="libx264",
        pixel_format="yuv420p",
        crf=crf,
        preset="ultrafast",
        extra_options={"g": max(1, round(spec.fps)), "threads": 1},
    )
    tmp = Path(path).with_suffix(".part.mp4")
    with encoder.open_file(tmp):
        for start in range(0, spec.num_frames, chunk_frames):
            stream.add_frames(torch.from_numpy(render_frames(spec, start, chunk_frames)))
    tmp.replace(path)


# --------------------------------------------------------------------------------------------------
# Questions, answers and teacher traces


def question_for(kind: QuestionType, layout: Layout = "cue") -> tuple[str, list[str]]:
    """The question text and options (empty unless `mcq`) of a question type."""
    single = layout == "single"
    if kind == "mcq":
        return (SINGLE_MCQ_QUESTION if single else MCQ_QUESTION), list(OPTIONS)
    if kind == "oe":
        return (SINGLE_OE_QUESTION if single else OE_QUESTION), []
    return (SINGLE_TVG_QUESTION if single else TVG_QUESTION), []


def answer_for(spec: VideoSpec, kind: QuestionType) -> str:
    colour = spec.target.colour or ""
    if kind == "mcq":
        return OPTION_LETTERS[OPTIONS.index(colour)]
    if kind == "oe":
        return colour
    return f"[{spec.target.start_s:g}, {spec.target.end_s:g}]"


def _fmt_times(times: Sequence[float]) -> str:
    parts = [f"{t:.1f} s" for t in times]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def describe_window(spec: VideoSpec, timestamps: Sequence[float]) -> str:
    """What a perfect sub-agent says about frames at `timestamps`: what is seen and when."""
    seen: dict[tuple[str, str | None], list[float]] = {}
    for t in timestamps:
        for event in spec.visible_at(t):
            seen.setdefault((event.kind, event.colour), []).append(t)
    if not seen:
        return "Only the plain, slowly changing background is visible; no shape or pattern appears."
    sentences = []
    for (kind, colour), times in sorted(seen.items(), key=lambda kv: kv[1][0]):
        what = (
            "A black-and-white checkerboard fills the frame"
            if kind == "cue"
            else f"A {colour} square is visible"
        )
        sentences.append(f"{what} at {_fmt_times(times)}.")
    return " ".join(sentences)


@dataclass
class Grid:
    duration_s: float
    fps: float
    num_frames: int
    begin_s: float = 0.0


def _grid(spec: VideoSpec) -> Grid:
    return Grid(spec.duration_s, spec.fps, spec.num_frames)


def candidate_windows(
    spec: VideoSpec, overview_times: Sequence[float]
) -> tuple[str, list[tuple[float, float]]]:
    """The teacher's reasoning about the overview and the windows it crops (in parallel)."""
    cue_times = [t for t in overview_times if spec.cue.active(t)]
    d = spec.duration_s
    if cue_times:
        anchor = cue_times[-1]
        seen = f"The checkerboard is visible in the overview at {_fmt_times(cue_times)}."
    else:  # a sparse overview can miss it: the teacher (which knows) searches around it
        anchor = spec.cue.end_s
        seen = (
            "The checkerboard is not in the overview frames, so I search the stretch around "
            f"{max(0.0, anchor - 6.0):.0f}-{min(d, anchor + 12.0):.0f} s."
        )
    windows = [(anchor - 6.0, anchor), (anchor, anchor + 6.0), (anchor + 6.0, anchor + 12.0)]
    clamped = []
    for s, e in windows:
        s, e = max(0.0, s), min(d, e)
        if e - s >= 1.0:
            clamped.append((round(s, 1), round(e, 1)))
    return seen, clamped


def _tool_call(start: float, end: float) -> str:
    args = {"start_time": start, "end_time": end}
    return "<tool_call>" + json.dumps({"name": CROP_VIDEO, "arguments": args}) + "</tool_call>"


def _msg(role: str, content: str) -> dict[str, str]:
    return {"role": role, "content": content}


def _extra_info(spec: VideoSpec, kind: QuestionType, seed: int) -> dict[str, Any]:
    question, options = question_for(kind, spec.layout)
    return {
        "answer": answer_for(spec, kind),
        "question_type": kind,
        "question": question,
        "options": options,
        "video_id": spec.video_id,
        "duration_s": spec.duration_s,
        "fps": spec.fps,
        "cue_window_s": [spec.cue.start_s, spec.cue.end_s],
        "needle_window_s": [spec.target.start_s, spec.target.end_s],
        "needle_colour": spec.target.colour,
        "layout": spec.layout,
        "needle_box": list(spec.target.box or ()),
        "distractors": [
            {"window_s": [e.start_s, e.end_s], "colour": e.colour} for e in spec.distractors
        ],
        "seed": seed,
    }


def rl_rows(spec: VideoSpec, video: str, config: SynthConfig, seed: int) -> list[dict[str, Any]]:
    """RL rows in the reference schema: `prompt` with a `<video>` placeholder, `videos`,
    `extra_info` (a JSON string with `answer`, `question_type`, `question`, `options`, ...)."""
    rows = []
    for kind in config.question_types:
        question, options = question_for(kind, spec.layout)
        rows.append(
            {
                "id": f"{spec.video_id}_{kind}",
                "data_source": DATA_SOURCE,
                "prompt": [_msg("user", "<video>\n" + format_question(question, options))],
                "videos": [{"video": video}],
                "extra_info": json.dumps(_extra_info(spec, kind, seed)),
            }
        )
    return rows


def sft_rows(spec: VideoSpec, video: str, config: SynthConfig, seed: int) -> list[dict[str, Any]]:
    """Teacher traces: one main-agent trace per question type (think -> parallel crop_video calls
    -> tool responses -> think -> answer) and one sub-agent trace per cropped window.

    `messages` are text; the `<video>` placeholder of the first user message stands for the frames
    described by `frames` (`{"start_s", "end_s", "num_frames"}`): the overview for `agent="main"`,
    the crop for `agent="subagent"`. `sft_conversation` rebuilds the multimodal messages.
    """
    if spec.layout == "single":
        return _single_sft_rows(spec, video, config, seed)
    grid = _grid(spec)
    k = min(config.sft_overview_frames, spec.num_frames)
    overview_times = list(overview_sample(grid, k).timestamps_s)
    seen, windows = candidate_windows(spec, overview_times)
    crops = []
    for s, e in windows:
        sample = crop_sample(grid, s, e, fps=config.crop_fps, max_frames=config.crop_max_frames)
        assert sample is not None
        crops.append((sample, describe_window(spec, sample.timestamps_s)))
    target_times = [t for sample, _ in crops for t in sample.timestamps_s if spec.target.active(t)]
    rows: list[dict[str, Any]] = []
    for kind in config.question_types:
        question, options = question_for(kind, spec.layout)
        intro = f"The video is {spec.duration_s:.1f} seconds long. Overview ({k} frames):"
        calls = "\n".join(_tool_call(s, e) for s, e in windows)
        first = (
            "<think>\nThe question is about the shape that comes right after the checkerboard. "
            f"{seen} The shape should follow soon after, so I look closely at {len(windows)} "
            "windows around it in parallel.\n</think>\n" + calls
        )
        tool_msgs = [
            _msg(
                "tool",
                tool_response_message(ToolOutput(window_s=sample.window_s), summary=text).text,
            )
            for sample, text in crops
        ]
        colour = spec.target.colour
        found = (
            f"The helpers saw a {colour} square at {_fmt_times(target_times)}, right after the "
            "checkerboard."
        )
        if kind == "tvg":
            found += f" It is on screen from {spec.target.start_s:g} s to {spec.target.end_s:g} s."
        final = f"<think>\n{found}\n</think>\n<answer>{answer_for(spec, kind)}</answer>"
        rows.append(
            {
                "id": f"{spec.video_id}_{kind}_main",
                "agent": "main",
                "data_source": DATA_SOURCE,
                "videos": [{"video": video}],
                "frames": {"start_s": 0.0, "end_s": spec.duration_s, "num_frames": k},
                "messages": [
                    _msg("system", system_prompt(config.prompt_mode)),
                    _msg("user", f"{intro}<video>Question: {format_question(question, options)}"),
                    _msg("assistant", first),
                    *tool_msgs,
                    _msg("assistant", final),
                ],
                "extra_info": json.dumps(_extra_info(spec, kind, seed)),
            }
        )
    return rows + _subagent_rows(spec, video, crops, seed)


def _subagent_rows(
    spec: VideoSpec, video: str, crops: Sequence[tuple[Any, str]], seed: int
) -> list[dict[str, Any]]:
    """One SFT row per crop: the sub-agent's prompt over the crop's window and its teacher summary."""
    question, _ = question_for("oe", spec.layout)
    rows = []
    for n, (sample, text) in enumerate(crops):
        start, end = sample.window_s
        prompt = build_subagent_prompt(question, (start, end), [])
        rows.append(
            {
                "id": f"{spec.video_id}_sub{n}",
                "agent": "subagent",
                "data_source": DATA_SOURCE,
                "videos": [{"video": video}],
                "frames": {"start_s": start, "end_s": end, "num_frames": len(sample.indices)},
                "messages": [
                    _msg("system", prompt[0].text),
                    _msg("user", f"<video>Question: {question}"),
                    _msg("assistant", f"<answer>{text}</answer>"),
                ],
                "extra_info": json.dumps(_extra_info(spec, "oe", seed)),
            }
        )
    return rows


def equal_windows(duration_s: float, n: int) -> list[tuple[float, float]]:
    """`n` equal windows covering `[0, duration_s]`, bounds rounded to 0.1 s."""
    return [(round(duration_s * i / n, 1), round(duration_s * (i + 1) / n, 1)) for i in range(n)]


def _trace_rng(seed: int, spec: VideoSpec, kind: str) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(f"{spec.video_id}/{kind}".encode())])


def _single_sft_rows(
    spec: VideoSpec, video: str, config: SynthConfig, seed: int
) -> list[dict[str, Any]]:
    """Teacher traces of the `single` layout: short texts a tiny model can learn in minutes.

    Main agent, tool trace: "I look closer" -> one crop_video call per equal window (parallel) ->
    the sub-agents' "red square" / "no square" -> "A helper saw the square." -> answer.
    Main agent, overview trace (a `1 - tool_fraction` share, seeded per video and question type):
    "The overview shows the square." -> answer, or "The overview shows no square." -> a guess.
    Sub-agent: "<answer>red square</answer>" or "<answer>no square</answer>" per window.

    The colour word always starts a line or follows `<answer>`, so the byte-level BPE gives it the
    same tokens in the sub-agent's summary, the tool response and the final answer (" red" after a
    space is another token): the main agent's answer is a copy of tokens it was shown.
    """
    grid = _grid(spec)
    k = min(config.sft_overview_frames, spec.num_frames)
    overview_times = list(overview_sample(grid, k).timestamps_s)
    windows = equal_windows(spec.duration_s, config.crop_windows)
    with_times = "tvg" in config.question_types
    colour = spec.target.colour
    crops = []
    for s, e in windows:
        sample = crop_sample(grid, s, e, fps=config.crop_fps, max_frames=config.crop_max_frames)
        assert sample is not None
        seen = [t for t in sample.timestamps_s if spec.target.active(t)]
        if not seen:
            text = "no square"
        elif with_times:
            text = f"{colour} square at {_fmt_times(seen)}"
        else:
            text = f"{colour} square"
        crops.append((sample, text))
    intro = f"The video is {spec.duration_s:.1f} seconds long. Overview ({k} frames):"
    rows: list[dict[str, Any]] = []
    for kind in config.question_types:
        question, options = question_for(kind, spec.layout)
        rng = _trace_rng(seed, spec, kind)
        uses_tool = bool(rng.random() < config.tool_fraction)
        answer = answer_for(spec, kind)
        if uses_tool:
            calls = "\n".join(_tool_call(s, e) for s, e in windows)
            found = "A helper saw the square."
            if kind == "tvg":
                found += (
                    f" It is on screen from {spec.target.start_s:g} s to {spec.target.end_s:g} s."
                )
            turns = [
                _msg(
                    "assistant",
                    f"<think>\nI look closer at {len(windows)} windows.\n</think>\n{calls}",
                ),
                *(
                    _msg(
                        "tool",
                        tool_response_message(
                            ToolOutput(window_s=sample.window_s), summary=text
                        ).text,
                    )
                    for sample, text in crops
                ),
                _msg("assistant", f"<think>\n{found}\n</think>\n<answer>{answer}</answer>"),
            ]
        else:
            if spec.target_visible(overview_times):
                think = "The overview shows the square."
            else:  # the overview missed it: the teacher guesses, as a policy without tools must
                guess = OPTIONS[int(rng.integers(len(OPTIONS)))]
                think = "The overview shows no square."
                if kind == "tvg":
                    t0 = round(float(rng.uniform(0, spec.duration_s - config.needle_s)), 1)
                    answer = f"[{t0:g}, {t0 + config.needle_s:g}]"
                else:
                    answer = OPTION_LETTERS[OPTIONS.index(guess)] if kind == "mcq" else guess
            turns = [_msg("assistant", f"<think>\n{think}\n</think>\n<answer>{answer}</answer>")]
        rows.append(
            {
                "id": f"{spec.video_id}_{kind}_main",
                "agent": "main",
                "data_source": DATA_SOURCE,
                "videos": [{"video": video}],
                "frames": {"start_s": 0.0, "end_s": spec.duration_s, "num_frames": k},
                "messages": [
                    _msg("system", system_prompt(config.prompt_mode)),
                    _msg("user", f"{intro}<video>Question: {format_question(question, options)}"),
                    *turns,
                ],
                "extra_info": json.dumps(_extra_info(spec, kind, seed)),
            }
        )
    return rows + _subagent_rows(spec, video, crops, seed)


def sft_conversation(
    row: dict[str, Any], root: str | os.PathLike[str], *, reader: VideoReader | None = None
) -> list[Message]:
    """The SFT row as core `Message`s with real frames: the prompt is rebuilt with
    `build_main_prompt` / `build_subagent_prompt` (frames decoded by `reader`), then the trace."""

    reader = reader or default_reader()
    extra = json.loads(row["extra_info"])
    path = Path(root) / row["videos"][0]["video"]
    spec = row["frames"]
    messages = row["messages"]
    if row["agent"] == "main":
        frames = reader.overview(path, int(spec["num_frames"]))
        prompt = build_main_prompt(
            extra["question"],
            frames,
            options=extra["options"] or None,
            duration_s=float(spec["end_s"]),
        )
        return [*prompt, *(Message(m["role"], m["content"]) for m in messages[2:])]

    call = CropVideoArgs(
        start_time=spec["start_s"], end_time=spec["end_s"], num_frames=int(spec["num_frames"])
    )
    (out,) = reader.crop(path, [call])
    if not out.ok:
        raise ValueError(f"SFT row {row['id']}: {out.error}")
    prompt = build_subagent_prompt(extra["question"], out.window_s or (0.0, 0.0), out.frames)
    return [*prompt, *(Message(m["role"], m["content"]) for m in messages[2:])]


# --------------------------------------------------------------------------------------------------
# Generation


@dataclass
class SynthResult:
    out_dir: Path
    videos: list[Path]
    rl_path: Path
    sft_path: Path
    num_rl_rows: int
    num_sft_rows: int
    seconds: float
    config: dict[str, Any] = field(default_factory=dict)


def _make_one(
    args: tuple[SynthConfig, int, int, str],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str]:
    config, seed, index, out_dir = args
    spec = plan_video(config, seed, index)
    rel = f"{VIDEO_DIR}/{spec.video_id}.mp4"
    write_video(spec, Path(out_dir) / rel, chunk_frames=config.chunk_frames, crf=config.crf)
    return rl_rows(spec, rel, config, seed), sft_rows(spec, rel, config, seed), rel


def iter_specs(config: SynthConfig, n: int, seed: int) -> Iterator[VideoSpec]:
    for i in range(n):
        yield plan_video(config, seed, i)


def generate(
    out_dir: str | os.PathLike[str],
    *,
    n: int,
    config: SynthConfig | None = None,
    seed: int = 0,
    workers: int | None = None,
    progress: bool = True,
) -> SynthResult:
    """Write `n` videos to `out_dir/videos/`, their RL rows to `out_dir/rl.parquet`, teacher traces
    to `out_dir/sft.parquet`, and `out_dir/manifest.json`. Video paths in rows are relative to
    `out_dir`. `workers` processes encode in parallel (default: up to 2)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    config = config or SynthConfig()
    out = Path(out_dir)
    (out / VIDEO_DIR).mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    jobs = [(config, seed, i, str(out)) for i in range(n)]
    workers = max(1, min(workers if workers is not None else min(2, os.cpu_count() or 1), n))
    results: list[tuple[list[dict[str, Any]], list[dict[str, Any]], str]]
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=n, desc="synth videos", unit="video")
    if workers > 1:  # import the encoder once, before forking the workers
        import torchcodec.encoders  # noqa: F401

    if workers == 1:
        results = []
        for job in jobs:
            results.append(_make_one(job))
            if bar is not None:
                bar.update()
    else:
        with ProcessPoolExecutor(workers) as pool:
            results = []
            for item in pool.map(_make_one, jobs, chunksize=max(1, n // (4 * workers))):
                results.append(item)
                if bar is not None:
                    bar.update()
    if bar is not None:
        bar.close()
    rl = [r for rows, _, _ in results for r in rows]
    sft = [r for _, rows, _ in results for r in rows]
    rl_path, sft_path = out / RL_FILE, out / SFT_FILE
    pq.write_table(pa.Table.from_pylist(rl), rl_path)
    pq.write_table(pa.Table.from_pylist(sft), sft_path)
    seconds = time.perf_counter() - t0
    manifest = {
        "generator": "paravt.tools.synth",
        "n": n,
        "seed": seed,
        "config": config.model_dump(mode="json"),
        "rl_rows": len(rl),
        "sft_rows": len(sft),
        "seconds": round(seconds, 2),
        "videos": [rel for _, _, rel in results],
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return SynthResult(
        out,
        [out / rel for _, _, rel in results],
        rl_path,
        sft_path,
        len(rl),
        len(sft),
        seconds,
        manifest,
    )


def spec_dict(spec: VideoSpec) -> dict[str, Any]:
    """A JSON-friendly view of a spec (for debugging and manifests)."""
    return asdict(spec)
