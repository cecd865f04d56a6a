"""The crop tool on real H.264 clips: frames match an independent decode at their timestamps."""

from __future__ import annotations

import asyncio
import itertools

import pytest
import torch

from paravt.core import CropVideoArgs, Toolbox, build_main_prompt, build_subagent_prompt
from paravt.tools import CropConfig, CropVideoTool, VideoReader, probe
from paravt.tools.video import keyframe_indices

# Mean absolute difference (0-255) allowed between our resized frame and PyAV's frame resized the
# same way: both are decodes of the same H.264 frame, only RGB conversion and scaler differ.
TOLERANCE = 1.0


def _check_frames_match(reader: VideoReader, path, reference, outputs) -> int:  # type: ignore[no-untyped-def]
    info = reader.probe(path)
    height, width = reader.frame_size(info)
    ref = reference.chw(height, width).float()
    checked = 0
    for out in outputs:
        assert out.ok, out.error
        for frame in out.frames:
            assert frame.image.dtype == torch.uint8
            assert tuple(frame.image.shape) == (3, height, width)
            mae = (ref - frame.image.float()).abs().mean(dim=(1, 2, 3))
            at = reference.index_at(frame.timestamp_s)
            assert abs(reference.times[at] - frame.timestamp_s) < 1e-3
            assert mae[at] <= TOLERANCE, (
                f"frame at {frame.timestamp_s:.3f} s differs by {mae[at]:.2f}"
            )
            # ...and it is that frame, not a neighbour: no other frame of the clip is closer.
            assert mae[at] <= mae.min() + 0.02
            checked += 1
    return checked


@pytest.mark.parametrize(
    "clip",
    [
        pytest.param("bikes.mp4", marks=pytest.mark.slow),
        "carphone_pristine.mp4",
        "bigbuckbunny.mp4",
    ],
)
def test_every_cropped_frame_matches_an_independent_decode_at_its_timestamp(
    clip, real_clips, reference_decodes
):  # type: ignore[no-untyped-def]
    reader = VideoReader(cache_bytes=0)
    info = reader.probe(real_clips[clip])
    d = info.duration_s
    calls = [
        CropVideoArgs(start_time=0.0, end_time=d),
        CropVideoArgs(start_time=0.25 * d, end_time=0.75 * d, num_frames=16),
        CropVideoArgs(start_time=1.03, end_time=2.97, num_frames=7),
        CropVideoArgs(start_time=d - 1.0, end_time=d),
    ]
    outputs = reader.crop(real_clips[clip], calls)
    for call, out in zip(calls, outputs):
        start, end = out.window_s
        times = [f.timestamp_s for f in out.frames]
        assert times == sorted(set(times)), "timestamps are sorted and unique"
        assert all(start - 1e-6 <= t <= end + 1e-6 for t in times), (times, out.window_s)
        if call.num_frames:
            assert len(times) == call.num_frames
    assert _check_frames_match(reader, real_clips[clip], reference_decodes[clip], outputs) >= 20


def test_the_overview_spreads_frames_over_the_whole_video_and_matches_the_decode(
    real_clips, reference_decodes
):  # type: ignore[no-untyped-def]
    reader = VideoReader()
    frames = reader.overview(real_clips["bikes.mp4"], 8)
    times = [f.timestamp_s for f in frames]
    assert len(frames) == 8 and times == sorted(set(times))
    assert times[0] < 10.0 / 8 and times[-1] > 10.0 - 10.0 / 8  # first and last eighth covered
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert max(gaps) - min(gaps) <= 0.041  # uniform up to one frame period (25 fps)
    from paravt.core import ToolOutput

    output = ToolOutput(frames=frames, window_s=(0.0, 10.0))
    _check_frames_match(reader, real_clips["bikes.mp4"], reference_decodes["bikes.mp4"], [output])


def test_the_overview_is_decoded_once_for_many_rollouts_of_a_prompt(real_clips):  # type: ignore[no-untyped-def]
    reader = VideoReader()
    first = reader.overview(real_clips["bikes.mp4"], 16)
    misses = reader.cache.stats.misses
    for _ in range(7):
        again = reader.toolbox(real_clips["bikes.mp4"]).overview(16)
        assert [f.timestamp_s for f in again] == [f.timestamp_s for f in first]
    assert reader.cache.stats.misses == misses
    assert reader.cache.stats.hits >= 7 * 16


def test_the_cache_stays_within_its_memory_bound(real_clips):  # type: ignore[no-untyped-def]
    frame_bytes = 3 * 128 * 320  # bikes at the default pixel budget
    reader = VideoReader(cache_bytes=10 * frame_bytes)
    reader.overview(real_clips["bikes.mp4"], 32)
    assert reader.cache.stats.bytes <= 10 * frame_bytes
    assert reader.cache.stats.entries == 10
    assert reader.cache.stats.evictions == 22


def test_a_turn_returns_one_output_per_call_in_call_order(real_clips):  # type: ignore[no-untyped-def]
    tool = CropVideoTool(real_clips["bikes.mp4"], reader=VideoReader())
    assert isinstance(tool, Toolbox)
    windows = [(6.0, 8.0), (0.0, 1.0), (6.5, 7.5), (2.0, 5.0)]  # overlapping, out of order
    calls = [CropVideoArgs(start_time=s, end_time=e) for s, e in windows]
    outputs = asyncio.run(tool.execute(calls))
    assert [o.window_s for o in outputs] == windows
    for (s, e), out in zip(windows, outputs):
        assert out.frames and all(s <= f.timestamp_s <= e for f in out.frames)
        assert len(out.frames) == max(1, min(16, round(e - s)))


def test_a_window_past_the_end_is_clamped_and_the_clamp_is_stated(real_clips):  # type: ignore[no-untyped-def]
    reader = VideoReader()
    (out,) = reader.crop(real_clips["bikes.mp4"], [CropVideoArgs(start_time=8.0, end_time=912.0)])
    assert out.ok and out.window_s == (8.0, 10.0)
    assert "end_time 912 s is past the end of the video (10.0 s); clamped to 10.0 s" in out.text
    assert all(8.0 <= f.timestamp_s <= 10.0 for f in out.frames)


def test_a_window_starting_after_the_end_is_an_error_naming_window_and_duration(real_clips):  # type: ignore[no-untyped-def]
    reader = VideoReader()
    bad, good = reader.crop(
        real_clips["bikes.mp4"],
        [CropVideoArgs(start_time=700, end_time=710), CropVideoArgs(start_time=1, end_time=3)],
    )
    assert not bad.ok and "700-710 s" in bad.error and "10.0 s" in bad.error
    assert good.ok and len(good.frames) == 2


def test_a_window_shorter_than_a_frame_still_returns_the_frame_on_screen(real_clips):  # type: ignore[no-untyped-def]
    reader = VideoReader()
    (out,) = reader.crop(real_clips["bikes.mp4"], [CropVideoArgs(start_time=4.01, end_time=4.02)])
    assert out.ok and [round(f.timestamp_s, 2) for f in out.frames] == [4.0]


def test_asking_for_more_frames_than_the_window_holds_returns_each_frame_once(real_clips):  # type: ignore[no-untyped-def]
    reader = VideoReader()
    (out,) = reader.crop(
        real_clips["bikes.mp4"], [CropVideoArgs(start_time=2.0, end_time=2.2, num_frames=16)]
    )
    times = [round(f.timestamp_s, 2) for f in out.frames]
    assert times == [2.0, 2.04, 2.08, 2.12, 2.16, 2.2]
    assert "holds only 6 frames" in out.text


def test_frames_feed_the_core_prompt_builders(real_clips):  # type: ignore[no-untyped-def]
    reader = VideoReader()
    path = real_clips["carphone_pristine.mp4"]
    info = probe(path)
    overview = reader.overview(path, 4)
    messages = build_main_prompt("What is shown?", overview, duration_s=info.duration_s)
    assert len(messages[1].images) == 4
    (out,) = reader.crop(path, [CropVideoArgs(start_time=1, end_time=3)])
    sub = build_subagent_prompt("What is shown?", out.window_s, out.frames)
    assert len(sub[1].images) == 2


@pytest.mark.parametrize("clip", ["bikes.mp4", "carphone_pristine.mp4", "bigbuckbunny.mp4"])
def test_keyframe_indices_are_the_frames_an_independent_decoder_flags_as_keyframes(
    clip, real_clips, reference_decodes
):  # type: ignore[no-untyped-def]
    info = probe(real_clips[clip])
    keyframes = keyframe_indices(info)
    assert keyframes is not None
    times = [round(info.frame_time_s(i), 3) for i in keyframes]
    assert times == [round(t, 3) for t in reference_decodes[clip].key_times]


def test_an_overview_snapped_to_keyframes_stays_uniform_within_its_tolerance_and_true(
    real_clips, reference_decodes
):  # type: ignore[no-untyped-def]
    path = real_clips["bikes.mp4"]  # keyframes at 0, 1.2, 3.04, 5.48, 7.48, 9.68 s
    reader = VideoReader(CropConfig(overview_keyframe_snap=0.25), cache_bytes=0)
    frames = reader.overview(path, 8)
    info = reader.probe(path)
    spacing = info.duration_s / 8
    uniform = [(k + 0.5) * spacing for k in range(8)]
    times = [f.timestamp_s for f in frames]
    assert len(times) == 8 and times == sorted(set(times))
    for t, u in zip(times, uniform):
        assert abs(t - u) <= 0.25 * spacing + 1 / info.fps, (t, u)
    # Uniform frames at 0.6 1.84 3.12 4.36 5.6 6.84 8.12 9.36 s; 3.12 and 5.6 have a keyframe
    # within a quarter spacing (0.31 s), the others do not (9.68 s is 0.32 s from 9.36 s).
    assert [round(t, 2) for t in times] == [0.6, 1.84, 3.04, 4.36, 5.48, 6.84, 8.12, 9.36]
    keys = {round(t, 3) for t in reference_decodes["bikes.mp4"].key_times}
    assert {3.04, 5.48} <= keys
    exact = VideoReader(cache_bytes=0).overview(path, 8)
    assert times != [f.timestamp_s for f in exact]
    from paravt.core import ToolOutput

    output = ToolOutput(frames=frames, window_s=(0.0, info.duration_s))
    _check_frames_match(reader, path, reference_decodes["bikes.mp4"], [output])


def test_frames_decoded_in_small_memory_bounded_groups_still_match_the_decode(
    real_clips, reference_decodes, monkeypatch
):  # type: ignore[no-untyped-def]
    from paravt.tools import crop

    path = real_clips["bigbuckbunny.mp4"]  # 1280x720: 2.7 MB per native frame
    monkeypatch.setattr(crop, "DECODE_GROUP_BYTES", 2 * 3 * 1280 * 720)  # two frames per group
    reader = VideoReader(cache_bytes=0, workers=1)
    info = reader.probe(path)
    outputs = reader.crop(
        path,
        [
            CropVideoArgs(start_time=0.0, end_time=info.duration_s, num_frames=9),
            CropVideoArgs(start_time=1.0, end_time=1.5, num_frames=5),
        ],
    )
    assert [len(o.frames) for o in outputs] == [9, 5]
    checked = _check_frames_match(reader, path, reference_decodes["bigbuckbunny.mp4"], outputs)
    assert checked == 14
