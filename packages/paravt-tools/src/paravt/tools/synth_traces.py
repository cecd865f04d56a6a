"""Synthetic tasks' questions, answers and teacher traces: the RL rows and the SFT conversations
(main agent and sub-agents) of one planned video (`paravt.tools.synth_video.VideoSpec`).

The task family is described in `paravt.tools.synth`, which also writes whole datasets.
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

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

from paravt.tools.synth_video import (
    DATA_SOURCE,
    MCQ_QUESTION,
    OE_QUESTION,
    OPTIONS,
    SINGLE_MCQ_QUESTION,
    SINGLE_OE_QUESTION,
    SINGLE_TVG_QUESTION,
    TVG_QUESTION,
    Layout,
    QuestionType,
    SynthConfig,
    VideoSpec,
)

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
        calls = "\n".join(_tool_call(s, e) for s, e in windows)
        first = (
            "<think>\nThe question is about the shape that comes right after the checkerboard. "
            f"{seen} The shape should follow soon after, so I look closely at {len(windows)} "
            "windows around it in parallel.\n</think>\n" + calls
        )
        colour = spec.target.colour
        found = (
            f"The helpers saw a {colour} square at {_fmt_times(target_times)}, right after the "
            "checkerboard."
        )
        if kind == "tvg":
            found += f" It is on screen from {spec.target.start_s:g} s to {spec.target.end_s:g} s."
        final = f"<think>\n{found}\n</think>\n<answer>{answer_for(spec, kind)}</answer>"
        turns = [_msg("assistant", first), *_tool_msgs(crops), _msg("assistant", final)]
        rows.append(_main_row(spec, video, kind, k, config, seed, turns))
    return rows + _subagent_rows(spec, video, crops, seed)


def _tool_msgs(crops: Sequence[tuple[Any, str]]) -> list[dict[str, str]]:
    """The tool responses of one turn: each crop's window and its summary text."""
    return [
        _msg(
            "tool",
            tool_response_message(ToolOutput(window_s=sample.window_s), summary=text).text,
        )
        for sample, text in crops
    ]


def _main_row(
    spec: VideoSpec,
    video: str,
    kind: QuestionType,
    k: int,
    config: SynthConfig,
    seed: int,
    turns: list[dict[str, str]],
) -> dict[str, Any]:
    """One main-agent teacher trace: system prompt, the `k`-frame overview with the question, then
    the assistant's (and tools') `turns`."""
    question, options = question_for(kind, spec.layout)
    intro = f"The video is {spec.duration_s:.1f} seconds long. Overview ({k} frames):"
    return {
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
    rows: list[dict[str, Any]] = []
    for kind in config.question_types:
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
                *_tool_msgs(crops),
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
        rows.append(_main_row(spec, video, kind, k, config, seed, turns))
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
