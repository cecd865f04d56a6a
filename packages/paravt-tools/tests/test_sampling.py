"""Sampling policies and the Qwen3-VL resize rule, as properties over many inputs."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from paravt.tools import crop_sample, overview_sample, resize_frames, smart_resize
from paravt.tools.sampling import window_indices


@dataclass(frozen=True)
class Grid:
    duration_s: float
    fps: float
    num_frames: int
    begin_s: float = 0.0


def grid(duration_s: float, fps: float) -> Grid:
    return Grid(duration_s, fps, max(1, round(duration_s * fps)))


def test_smart_resize_matches_the_reference_budget_examples():
    assert smart_resize(272, 640) == (128, 320)  # floor-scaled under 50176
    assert smart_resize(720, 1280) == (160, 288)
    assert smart_resize(144, 176) == (128, 192)  # rounded to multiples of 32, within budget
    assert smart_resize(10, 12) == (32, 32)  # ceil-scaled above min_pixels... and at least a patch
    assert smart_resize(20, 20, min_pixels=4096, max_pixels=50176) == (64, 64)


def test_extreme_aspect_ratios_are_rejected_with_the_ratio_named():
    with pytest.raises(ValueError, match="aspect ratio 250:1"):
        smart_resize(4, 1000)


@given(
    st.integers(1, 4000),
    st.integers(1, 4000),
    st.sampled_from([(784, 50176), (1024, 4096), (256 * 32 * 32, 16384 * 32 * 32)]),
)
def test_smart_resize_gives_multiples_of_32_within_the_budget(height, width, budget):  # type: ignore[no-untyped-def]
    lo, hi = budget
    if max(height, width) / min(height, width) > 200:
        with pytest.raises(ValueError):
            smart_resize(height, width, min_pixels=lo, max_pixels=hi)
        return
    h, w = smart_resize(height, width, min_pixels=lo, max_pixels=hi)
    assert h % 32 == 0 and w % 32 == 0 and h >= 32 and w >= 32
    if min(h, w) > 32:  # not pinned to one patch group by a thin frame
        assert h * w <= hi
    if h * w < lo:  # only when the rounding of a tiny frame cannot reach it
        assert max(height, width) * (lo / (height * width)) ** 0.5 <= 64


def test_resize_frames_returns_uint8_frames_at_the_budget_size():
    frames = torch.randint(0, 256, (3, 3, 272, 640), dtype=torch.uint8)
    out = resize_frames(frames)
    assert out.dtype == torch.uint8 and tuple(out.shape) == (3, 3, 128, 320)
    assert tuple(resize_frames(frames[0]).shape) == (3, 128, 320)


@settings(max_examples=300)
@given(
    duration=st.floats(0.5, 7200),
    fps=st.sampled_from([1.0, 4.0, 23.976, 25.0, 29.97, 60.0]),
    start=st.floats(0, 8000),
    length=st.floats(0.001, 3000),
    num_frames=st.one_of(st.none(), st.integers(1, 16)),
)
# The tail of a 1.25 s video at 1 fps: frame 0 stays on screen, no frame starts in [0.25, 1.25].
@example(duration=1.25, fps=1.0, start=0.25, length=1.0, num_frames=None)
def test_crop_timestamps_are_inside_the_window_sorted_and_unique(
    duration, fps, start, length, num_frames
):  # type: ignore[no-untyped-def]
    g = grid(duration, fps)
    sample = crop_sample(g, start, start + length, num_frames=num_frames)
    if start >= duration:
        assert sample is None
        return
    assert sample is not None
    lo, hi = sample.window_s
    assert lo == start and hi == min(start + length, duration)
    times = list(sample.timestamps_s)
    assert times == sorted(set(times)) and 1 <= len(times) <= 16
    assert all(0 <= i < g.num_frames for i in sample.indices)
    frame = 1.0 / fps
    # Every frame is on screen during the window; its timestamp is inside unless no frame starts
    # inside the window (a window shorter than one frame period, or the tail of a video whose last
    # frame stays on screen): then the frame on screen at the start is shown.
    assert all(lo - frame - 1e-6 <= t <= hi + 1e-6 for t in times)
    first_inside = max(0, math.ceil(lo * fps - 1e-6))
    if first_inside < g.num_frames and first_inside / fps <= hi + 1e-6:
        assert all(lo - 1e-6 <= t <= hi + 1e-6 for t in times)
    else:
        assert len(times) == 1
    expected = num_frames if num_frames else max(1, min(16, int((hi - lo) + 0.5)))
    first, last = window_indices(g, lo, hi)
    assert len(times) == min(expected, last - first + 1)  # fewer only if the window holds fewer


def test_a_crop_defaults_to_one_frame_per_second_between_one_and_sixteen():
    g = grid(600, 25)
    assert len(crop_sample(g, 10, 20).indices) == 10
    assert len(crop_sample(g, 10, 10.3).indices) == 1
    assert len(crop_sample(g, 0, 300).indices) == 16
    assert len(crop_sample(g, 0, 300, num_frames=4).indices) == 4


@given(duration=st.floats(1, 36000), k=st.sampled_from([4, 8, 16, 32, 64]))
def test_the_overview_spreads_k_frames_uniformly_over_the_video(duration, k):  # type: ignore[no-untyped-def]
    g = grid(duration, 25.0)
    sample = overview_sample(g, k)
    times = sample.timestamps_s
    assert len(times) == min(k, g.num_frames)
    assert list(times) == sorted(set(times))
    if len(times) == k and k > 1:
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert max(gaps) - min(gaps) <= 1 / 25 + 1e-9
        assert times[0] <= duration / k and times[-1] >= duration - duration / k - 1 / 25


def test_an_overview_of_zero_or_absurdly_many_frames_is_refused():
    with pytest.raises(ValueError, match=r"1\.\.1024"):
        overview_sample(grid(60, 25), 0)
    with pytest.raises(ValueError, match=r"1\.\.1024"):
        overview_sample(grid(60, 25), 100_000)


@given(
    duration=st.floats(1, 7200),
    k=st.sampled_from([4, 8, 16, 32, 64]),
    gop=st.integers(1, 300),
    snap=st.sampled_from([0.1, 0.25, 0.5]),
    data=st.data(),
)
def test_an_overview_snapped_to_keyframes_keeps_each_frame_within_its_tolerance(
    duration, k, gop, snap, data
):  # type: ignore[no-untyped-def]
    g = grid(duration, 25.0)
    keyframes = sorted(
        set(data.draw(st.lists(st.integers(0, g.num_frames - 1), max_size=g.num_frames // gop)))
    )
    uniform = overview_sample(g, k)
    sample = overview_sample(g, k, keyframes=keyframes, keyframe_snap=snap)
    assert len(sample.indices) == len(uniform.indices)
    assert list(sample.indices) == sorted(set(sample.indices))
    tolerance = snap * g.num_frames / k
    snapped = sample.indices != uniform.indices
    for i, u in zip(sample.indices, uniform.indices):
        if i != u:  # a frame moves only onto a keyframe within the tolerance
            assert i in keyframes and abs(i - u) <= tolerance
        elif snapped:  # ...and stays only if it is a keyframe itself or none is that close
            assert u in keyframes or all(abs(kf - u) > tolerance for kf in keyframes)
    assert sample.timestamps_s == tuple(g.begin_s + i / g.fps for i in sample.indices)


def test_a_frame_already_on_a_keyframe_stays_there_though_another_is_within_the_tolerance():
    # the case hypothesis found for the rule above: 130 s at 25 fps, 64 frames, snap 0.25
    # (tolerance 12.7 frames); uniform frame 76 is a keyframe, 64 is 12 away; frame 126 moves to 114
    g = grid(130.0, 25.0)
    uniform = overview_sample(g, 64)
    sample = overview_sample(g, 64, keyframes=[64, 76, 114], keyframe_snap=0.25)
    moved = {u: i for i, u in zip(sample.indices, uniform.indices) if i != u}
    assert 76 in uniform.indices and 76 in sample.indices
    assert moved == {126: 114}


def test_every_overview_frame_lands_on_a_keyframe_when_keyframes_are_dense_enough():
    g = grid(600, 25)  # 15000 frames, a keyframe every 2 s
    sample = overview_sample(g, 64, keyframes=list(range(0, 15000, 50)), keyframe_snap=0.25)
    assert all(i % 50 == 0 for i in sample.indices)
    assert len(sample.indices) == 64
    assert overview_sample(g, 64, keyframes=[], keyframe_snap=0.25) == overview_sample(g, 64)


def test_a_keyframe_snap_outside_zero_to_a_half_is_refused():
    with pytest.raises(ValueError, match=r"keyframe_snap must be in 0\.\.0\.5"):
        overview_sample(grid(60, 25), 8, keyframes=[0], keyframe_snap=0.75)
