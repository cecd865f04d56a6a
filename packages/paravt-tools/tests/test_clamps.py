"""Every bound of the crop tool: an error naming the argument and its range, or a clamp stated.

A stated clamp is a sentence in the tool's response text (what the model reads) and in
`ToolOutput.clamps` (what the runtime records in the call's trace).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from paravt.core import CropVideoArgs, parse_response
from paravt.tools import VideoReader
from paravt.tools.crop import MAX_CALLS_PER_TURN, CropConfig, FrameCache

SECONDS, FPS = 10, 10  # a 10 s clip at 10 fps: 100 frames


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from torchcodec.encoders import VideoEncoder

    ramp = (torch.arange(SECONDS * FPS).view(-1, 1, 1, 1) * 2).expand(-1, 3, 64, 64)
    path = tmp_path_factory.mktemp("clamps") / "ramp.mp4"
    VideoEncoder(ramp.to(torch.uint8).contiguous(), frame_rate=FPS).to_file(path)
    return path


def crop(clip: Path, config: CropConfig | None = None, **arguments: object):  # type: ignore[no-untyped-def]
    body = json.dumps({"name": "crop_video", "arguments": arguments})
    (call,) = parse_response(f"<tool_call>{body}</tool_call>").valid_calls
    (out,) = VideoReader(config).crop(clip, [call.args])  # type: ignore[list-item]
    return out


def assert_stated(out, sentence: str) -> None:  # type: ignore[no-untyped-def]
    assert out.ok, out.error
    assert sentence in out.text, out.text
    assert any(sentence in c for c in out.clamps), out.clamps


def test_within_bounds_nothing_is_clamped_and_nothing_is_said(clip: Path) -> None:
    out = crop(clip, start_time=1, end_time=3, num_frames=4)
    assert out.ok and len(out.frames) == 4 and out.clamps == [] and out.text == ""


def test_num_frames_above_the_protocol_limit_is_stated_by_the_tool(clip: Path) -> None:
    out = crop(clip, start_time=0, end_time=5, num_frames=1_000_000_000)
    assert_stated(out, "num_frames 1000000000 is above the limit of 16 frames per call")
    assert len(out.frames) == 16


def test_num_frames_above_the_tools_limit_is_stated(clip: Path) -> None:
    out = crop(clip, CropConfig(max_frames=4), start_time=0, end_time=5, num_frames=8)
    assert_stated(out, "num_frames 8 is above the tool's limit of 4 frames per call; clamped to 4.")
    assert len(out.frames) == 4


def test_num_frames_below_the_tools_minimum_is_stated(clip: Path) -> None:
    out = crop(clip, CropConfig(min_frames=3), start_time=0, end_time=5, num_frames=1)
    assert_stated(
        out, "num_frames 1 is below the tool's minimum of 3 frames per call; raised to 3."
    )
    assert len(out.frames) == 3


def test_a_window_past_the_end_is_clamped_and_stated(clip: Path) -> None:
    out = crop(clip, start_time=8, end_time=912)
    assert_stated(out, "end_time 912 s is past the end of the video (10.0 s); clamped to 10.0 s.")
    assert out.window_s == (8.0, 10.0)


def test_a_window_with_fewer_frames_than_asked_is_stated(clip: Path) -> None:
    out = crop(clip, start_time=1.0, end_time=1.25, num_frames=8)
    assert_stated(out, "num_frames 8: the window holds only 3 frames; returning 3.")
    assert len(out.frames) == 3


def test_a_window_starting_after_the_end_is_an_error_naming_the_range(clip: Path) -> None:
    out = crop(clip, start_time=12, end_time=20)
    assert not out.ok and "ask for a window inside 0-10.0 s" in (out.error or "")


def test_calls_over_the_per_turn_cap_are_errors_naming_the_cap(clip: Path) -> None:
    calls = [CropVideoArgs(start_time=1, end_time=2)] * (MAX_CALLS_PER_TURN + 2)
    outputs = VideoReader().crop(clip, calls)
    assert all(o.ok for o in outputs[:MAX_CALLS_PER_TURN])
    for n, out in enumerate(outputs[MAX_CALLS_PER_TURN:], start=MAX_CALLS_PER_TURN + 1):
        assert f"at most {MAX_CALLS_PER_TURN} calls per turn; call {n} of" in (out.error or "")


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"fps": 0}, "fps > 0"),
        ({"min_frames": 0}, "1 <= min_frames <= max_frames"),
        ({"min_frames": 5, "max_frames": 4}, "1 <= min_frames <= max_frames"),
        ({"overview_keyframe_snap": 0.7}, "overview_keyframe_snap must be in 0..0.5"),
        ({"min_pixels": 0}, "CropConfig.min_pixels/max_pixels"),
        ({"min_pixels": 4096, "max_pixels": 2048}, "0 < min_pixels <= max_pixels"),
        ({"min_pixels": 16, "max_pixels": 512}, "below one 32x32 patch group"),
    ],
)
def test_an_out_of_range_tool_setting_is_an_error_naming_it(kwargs: dict, named: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ValueError, match=named.replace("(", r"\(").replace(".", r"\.")):
        CropConfig(**kwargs)


def test_reader_and_cache_bounds_are_errors_naming_them() -> None:
    with pytest.raises(ValueError, match="workers must be at least 1, got 0"):
        VideoReader(workers=0)
    with pytest.raises(ValueError, match="max_bytes must be >= 0"):
        FrameCache(-1)
