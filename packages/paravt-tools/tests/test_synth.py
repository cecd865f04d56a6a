"""Synthetic needle tasks: parseable rows, verifiable ground truth, determinism, chunked rendering."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from paravt.core import CropVideoArgs, parse_response
from paravt.tools import VideoReader, probe
from paravt.tools.cli import main
from paravt.tools.synth import (
    COLOURS,
    OPTIONS,
    SynthConfig,
    plan_video,
    render_frames,
    sft_conversation,
)

CONFIG = SynthConfig(duration_s=40.0, num_needles=2)


@pytest.fixture(scope="module")
def synth_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("synth")
    code = main(["synth", "--out", str(out), "--n", "4", "--duration", "40", "--needles", "2",
                 "--seed", "3", "--workers", "1"])  # fmt: skip
    assert code == 0
    return out


def _rows(path: Path) -> list[dict]:  # type: ignore[type-arg]
    return pq.read_table(path).to_pylist()


def test_rl_rows_follow_the_reference_schema(synth_dir):  # type: ignore[no-untyped-def]
    rows = _rows(synth_dir / "rl.parquet")
    assert len(rows) == 4 * 3
    for row in rows:
        assert row["prompt"][0]["role"] == "user" and "<video>" in row["prompt"][0]["content"]
        assert (synth_dir / row["videos"][0]["video"]).exists()
        extra = json.loads(row["extra_info"])
        assert extra["question_type"] in {"mcq", "oe", "tvg"}
        if extra["question_type"] == "mcq":
            assert extra["options"] == list(OPTIONS) and extra["answer"] in "ABCD"
            assert OPTIONS["ABCD".index(extra["answer"])] == extra["needle_colour"]
        elif extra["question_type"] == "oe":
            assert extra["answer"] == extra["needle_colour"]
        else:
            start, end = json.loads(extra["answer"])
            assert [start, end] == extra["needle_window_s"]


def test_teacher_traces_parse_with_the_core_protocol(synth_dir):  # type: ignore[no-untyped-def]
    rows = _rows(synth_dir / "sft.parquet")
    main_rows = [r for r in rows if r["agent"] == "main"]
    sub_rows = [r for r in rows if r["agent"] == "subagent"]
    assert len(main_rows) == 12 and len(sub_rows) >= 4
    for row in main_rows:
        roles = [m["role"] for m in row["messages"]]
        calls = parse_response(row["messages"][2]["content"]).tool_calls
        assert roles == ["system", "user", "assistant"] + ["tool"] * len(calls) + ["assistant"]
        assert len(calls) >= 2 and all(c.ok for c in calls), "parallel, valid crop_video calls"
        final = parse_response(row["messages"][-1]["content"])
        assert final.answer == json.loads(row["extra_info"])["answer"]
        assert not final.tool_calls
        assert row["messages"][1]["content"].count("<video>") == 1
    for row in sub_rows:
        answer = parse_response(row["messages"][-1]["content"]).answer
        assert answer and (" s" in answer or "background" in answer)


def test_the_needle_colour_is_verifiable_by_decoding_its_frames(synth_dir):  # type: ignore[no-untyped-def]
    reader = VideoReader(cache_bytes=0)
    for row in _rows(synth_dir / "rl.parquet")[::3]:
        extra = json.loads(row["extra_info"])
        path = synth_dir / row["videos"][0]["video"]
        start, end = extra["needle_window_s"]
        (out,) = reader.crop(path, [CropVideoArgs(start_time=start, end_time=end - 0.01)])
        assert out.ok and out.frames
        info = probe(path)
        x0, y0, x1, y1 = extra["needle_box"]
        sy, sx = (
            out.frames[0].image.shape[1] / info.height,
            out.frames[0].image.shape[2] / info.width,
        )
        for frame in out.frames:
            cy, cx = int((y0 + y1) / 2 * sy), int((x0 + x1) / 2 * sx)
            rgb = frame.image[:, cy - 2 : cy + 3, cx - 2 : cx + 3].float().mean(dim=(1, 2)).numpy()
            nearest = min(COLOURS, key=lambda c: np.abs(np.asarray(COLOURS[c]) - rgb).sum())
            assert nearest == extra["needle_colour"], (frame.timestamp_s, rgb)
            assert np.abs(np.asarray(COLOURS[nearest]) - rgb).max() < 30


def test_the_background_alone_shows_no_saturated_colour(synth_dir):  # type: ignore[no-untyped-def]
    row = _rows(synth_dir / "rl.parquet")[0]
    extra = json.loads(row["extra_info"])
    busy = [extra["cue_window_s"], extra["needle_window_s"]] + [
        d["window_s"] for d in extra["distractors"]
    ]
    quiet = next(
        t for t in np.arange(0.5, 39.0, 0.5) if all(not a - 1 <= t <= b + 1 for a, b in busy)
    )
    (out,) = VideoReader().crop(
        synth_dir / row["videos"][0]["video"], [CropVideoArgs(start_time=quiet, end_time=quiet + 1)]
    )
    image = out.frames[0].image.float()
    saturation = (image.max(dim=0).values - image.min(dim=0).values).mean()
    assert saturation < 40


def test_the_same_seed_writes_the_same_rows_and_another_seed_does_not(tmp_path, synth_dir):  # type: ignore[no-untyped-def]
    again = tmp_path / "again"
    main(["synth", "--out", str(again), "--n", "4", "--duration", "40", "--needles", "2",
          "--seed", "3", "--workers", "2"])  # fmt: skip
    for name in ("rl.parquet", "sft.parquet"):
        assert _rows(again / name) == _rows(synth_dir / name)
    assert plan_video(CONFIG, 4, 0) != plan_video(CONFIG, 3, 0)


def test_videos_render_the_same_in_chunks_as_at_once():
    spec = plan_video(CONFIG, 0, 1)
    whole = render_frames(spec, 0, spec.num_frames)
    parts = np.concatenate([render_frames(spec, s, 7) for s in range(0, spec.num_frames, 7)])
    assert whole.shape == (spec.num_frames, 3, CONFIG.height, CONFIG.width)
    assert np.array_equal(whole, parts)


def test_sft_rows_rebuild_into_multimodal_conversations(synth_dir):  # type: ignore[no-untyped-def]
    rows = _rows(synth_dir / "sft.parquet")
    reader = VideoReader()
    main_row = next(r for r in rows if r["agent"] == "main")
    messages = sft_conversation(main_row, synth_dir, reader=reader)
    assert len(messages[1].images) == main_row["frames"]["num_frames"]
    assert messages[-1].role == "assistant" and "<answer>" in messages[-1].text
    sub_row = next(r for r in rows if r["agent"] == "subagent")
    sub = sft_conversation(sub_row, synth_dir, reader=reader)
    assert len(sub[1].images) == sub_row["frames"]["num_frames"]


def test_teacher_crops_default_to_four_frames_as_the_tiny_recipes_show(synth_dir):  # type: ignore[no-untyped-def]
    """paravt-train's tiny recipes cap a crop at video.max_crop_frames = 4; with the default
    `paravt-tools synth` no trace describes a frame the trainer does not show."""
    rows = _rows(synth_dir / "sft.parquet")
    crops = [r["frames"]["num_frames"] for r in rows if r["agent"] == "subagent"]
    assert crops and max(crops) == 4
    assert SynthConfig().crop_max_frames == 4
    # four frames over a 6 s window still catch the 2 s needle: every trace found it
    for r in rows:
        if r["agent"] == "main":
            colour = json.loads(r["extra_info"])["needle_colour"]
            assert re.search(rf"saw a {colour} square at \d", r["messages"][-1]["content"])


def test_a_duration_too_short_for_the_task_is_refused_with_the_minimum():
    with pytest.raises(ValueError, match="too short"):
        SynthConfig(duration_s=10)
    assert main(["synth", "--out", "/nonexistent/never", "--n", "1", "--duration", "5"]) == 2
