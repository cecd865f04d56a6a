"""Synthetic long videos: the task family's knobs (`SynthConfig`), each video's plan (`VideoSpec`,
deterministic given the seed), and its frames rendered and encoded in chunks (`write_video`).

The task family is described in `paravt.tools.synth`, which also writes whole datasets.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

if TYPE_CHECKING:
    pass

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

    def planned(cue: Event, target: Event, distractors: tuple[Event, ...]) -> VideoSpec:
        """The video with these events (its background drawn last from `rng`)."""
        return VideoSpec(
            video_id=f"synth_{seed:04d}_{index:05d}",
            duration_s=num_frames / fps,
            fps=fps,
            width=config.width,
            height=config.height,
            num_frames=num_frames,
            cue=cue,
            target=target,
            distractors=distractors,
            background=_background(rng),
            layout=config.layout,
        )

    if config.layout == "single":
        colour = OPTIONS[int(rng.integers(len(OPTIONS)))]
        t0 = _snap(rng.uniform(0.5, d - config.needle_s - 0.5), fps)
        target = Event("needle", t0, _snap(t0 + config.needle_s, fps), colour, square())
        return planned(Event("cue", 0.0, 0.0), target, ())  # the cue is never active

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
    return planned(cue, target, tuple(distractors))


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


def spec_dict(spec: VideoSpec) -> dict[str, Any]:
    """A JSON-friendly view of a spec (for debugging and manifests)."""
    return asdict(spec)
