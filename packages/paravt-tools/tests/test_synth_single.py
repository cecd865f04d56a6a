"""The `single` synthetic layout: one square, a sparse overview misses it, the parallel crops find it."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from paravt.core import CropVideoArgs, parse_response
from paravt.tools import VideoReader
from paravt.tools.sampling import crop_sample, overview_sample
from paravt.tools.synth import (
    COLOURS,
    SynthConfig,
    equal_windows,
    generate,
    plan_video,
)
from paravt.tools.synth_traces import _grid

SINGLE = SynthConfig(
    layout="single",
    duration_s=16.0,
    fps=2.0,
    needle_s=2.0,
    crop_max_frames=4,
    crop_windows=2,
    question_types=("oe", "mcq"),
    square_size=(0.9, 1.0),
)


def _shown(config: SynthConfig, k: int, n: int = 200) -> float:
    """Share of videos whose K-frame overview shows the square."""
    hits = 0
    for i in range(n):
        spec = plan_video(config, 0, i)
        hits += spec.target_visible(overview_sample(_grid(spec), k).timestamps_s)
    return hits / n


def test_a_small_overview_usually_misses_the_square_and_a_large_one_always_shows_it():
    assert _shown(SINGLE, 2) < 0.4
    assert _shown(SINGLE, 4) < 0.7
    assert _shown(SINGLE, 8) == 1.0  # one frame every needle_s seconds
    assert _shown(SINGLE, 16) == 1.0


def test_every_crop_of_the_parallel_windows_catches_the_square_when_it_is_inside():
    for i in range(200):
        spec = plan_video(SINGLE, 0, i)
        assert spec.distractors == () and not spec.cue.active(spec.cue.start_s)
        seen = 0
        for s, e in equal_windows(spec.duration_s, SINGLE.crop_windows):
            sample = crop_sample(_grid(spec), s, e, fps=1.0, max_frames=SINGLE.crop_max_frames)
            assert sample is not None and len(sample.indices) <= SINGLE.crop_max_frames
            seen += spec.target_visible(sample.timestamps_s)
        assert seen >= 1, (i, spec.target)
    # one crop (sequential dispatch, one tool turn) finds it only when it picks the right window
    first = [plan_video(SINGLE, 0, i).target.start_s < SINGLE.duration_s / 2 for i in range(200)]
    assert 0.3 < sum(first) / len(first) < 0.7


@pytest.fixture(scope="module")
def single_dir(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    out = tmp_path_factory.mktemp("single")
    config = SINGLE.model_copy(update={"tool_fraction": 0.5, "sft_overview_frames": 2})
    generate(out, n=8, config=config, seed=5, workers=1, progress=False)
    return out


def test_teacher_traces_mix_tool_calls_and_overview_answers(single_dir):  # type: ignore[no-untyped-def]
    rows = pq.read_table(single_dir / "sft.parquet").to_pylist()
    main = [r for r in rows if r["agent"] == "main"]
    subs = [r for r in rows if r["agent"] == "subagent"]
    assert len(main) == 16 and len(subs) == 16
    with_tool = 0
    for row in main:
        extra = json.loads(row["extra_info"])
        first = parse_response(row["messages"][2]["content"])
        if first.tool_calls:
            with_tool += 1
            windows = [(c.args.start_time, c.args.end_time) for c in first.tool_calls]
            assert windows == [(0.0, 8.0), (8.0, 16.0)]
            final = parse_response(row["messages"][-1]["content"])
            assert final.answer == extra["answer"], "the tool trace always answers right"
        else:
            assert first.answer is not None and len(row["messages"]) == 3
            if "no square" not in first.think:  # the overview showed it: answered right
                assert first.answer == extra["answer"]
    assert 0 < with_tool < len(main), "tool_fraction 0.5 gives both kinds of trace"
    for row in subs:
        extra = json.loads(row["extra_info"])
        said = parse_response(row["messages"][-1]["content"]).answer
        a, b = extra["needle_window_s"]
        s, e = row["frames"]["start_s"], row["frames"]["end_s"]
        overlaps = a < e and b > s
        assert said in ("no square", f"{extra['needle_colour']} square")
        if said != "no square":
            assert overlaps


def test_the_square_fills_the_crop_frames_it_is_reported_in(single_dir):  # type: ignore[no-untyped-def]
    rows = pq.read_table(single_dir / "rl.parquet").to_pylist()
    reader = VideoReader(cache_bytes=0)
    for row in rows[::2]:
        extra = json.loads(row["extra_info"])
        a, b = extra["needle_window_s"]
        (out,) = reader.crop(
            single_dir / row["videos"][0]["video"], [CropVideoArgs(start_time=a, end_time=b - 0.01)]
        )
        assert out.ok
        rgb = out.frames[0].image.float().mean(dim=(1, 2)).numpy()
        nearest = min(COLOURS, key=lambda c: np.abs(np.asarray(COLOURS[c]) - rgb).sum())
        assert nearest == extra["needle_colour"]


def test_bad_single_configs_are_refused_with_the_bound():
    with pytest.raises(ValueError, match="too short"):
        SynthConfig(layout="single", duration_s=3.0)
    with pytest.raises(ValueError, match="square_size"):
        SynthConfig(square_size=(0.8, 0.4))
