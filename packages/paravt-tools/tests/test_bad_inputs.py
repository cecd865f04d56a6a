"""Broken files and malformed calls: each yields a named error, never a crash of the turn."""

from __future__ import annotations

import asyncio
import builtins
import shutil
from pathlib import Path

import pytest
import torch

from paravt.core import CropVideoArgs
from paravt.tools import CropVideoTool, VideoError, VideoReader, probe
from paravt.tools import video as video_module


@pytest.fixture(scope="module")
def broken(tmp_path_factory: pytest.TempPathFactory, real_clips) -> dict[str, Path]:  # type: ignore[no-untyped-def]
    from torchcodec.encoders import AudioEncoder, VideoEncoder

    d = tmp_path_factory.mktemp("broken")
    files = {"missing": d / "missing.mp4", "directory": d / "a_directory.mp4"}
    files["directory"].mkdir()
    files["empty"] = d / "empty.mp4"
    files["empty"].write_bytes(b"")
    files["text"] = d / "notes.mp4"
    files["text"].write_text("this is not a video\n" * 100)
    # mp4 with its index (moov) at the end: cut in half, the index is gone.
    files["truncated_mp4"] = d / "truncated.mp4"
    data = real_clips["bikes.mp4"].read_bytes()
    files["truncated_mp4"].write_bytes(data[: len(data) // 2])
    # Matroska has its header first: cut in half, it opens and the second half is missing.
    ramp = (torch.arange(100).view(100, 1, 1, 1) * 2).expand(100, 3, 64, 64).to(torch.uint8)
    whole = d / "whole.mkv"
    VideoEncoder(ramp.contiguous(), frame_rate=10).to_file(whole, extra_options={"g": 10})
    files["truncated_mkv"] = d / "truncated.mkv"
    files["truncated_mkv"].write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    files["audio_only"] = d / "tone.wav"
    AudioEncoder(torch.zeros(1, 16000), sample_rate=16000).to_file(files["audio_only"])
    return files


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("missing", "does not exist"),
        ("directory", "is a directory"),
        ("empty", "is empty"),
        ("text", "not a readable video"),
        ("truncated_mp4", "not a readable video"),
        ("truncated_mkv", "truncated or corrupt"),
        ("audio_only", "has no video stream"),
    ],
)
def test_probe_names_what_is_wrong_with_a_broken_file(broken, name, message):  # type: ignore[no-untyped-def]
    with pytest.raises(VideoError, match=message) as err:
        probe(broken[name])
    assert broken[name].name in str(err.value)


@pytest.mark.parametrize(
    "name", ["missing", "directory", "empty", "text", "truncated_mp4", "audio_only"]
)
def test_a_broken_video_turns_every_call_into_an_error_response(broken, name):  # type: ignore[no-untyped-def]
    tool = CropVideoTool(broken[name], reader=VideoReader())
    calls = [CropVideoArgs(start_time=0, end_time=2), CropVideoArgs(start_time=3, end_time=4)]
    outputs = asyncio.run(tool.execute(calls))
    assert len(outputs) == 2
    assert all(not o.ok and o.error.startswith("crop_video: ") for o in outputs)


def test_a_window_that_fails_to_decode_does_not_affect_the_others(broken):  # type: ignore[no-untyped-def]
    reader = VideoReader()
    good, bad, good_again = reader.crop(
        broken["truncated_mkv"],
        [
            CropVideoArgs(start_time=0, end_time=2),
            CropVideoArgs(start_time=8, end_time=10),
            CropVideoArgs(start_time=1, end_time=3),
        ],
    )
    assert good.ok and len(good.frames) == 2
    assert not bad.ok and "8.0-10.0 s" in bad.error
    assert good_again.ok and len(good_again.frames) == 2


def test_the_overview_of_an_unreadable_video_raises_a_video_error(broken):  # type: ignore[no-untyped-def]
    with pytest.raises(VideoError, match="cannot decode the overview frame"):
        VideoReader().overview(broken["truncated_mkv"], 8)


def test_unvalidated_windows_are_refused_not_crashed_on(real_clips):  # type: ignore[no-untyped-def]
    reader = VideoReader()
    calls = [
        CropVideoArgs.model_construct(start_time=float("nan"), end_time=3.0, num_frames=None),
        CropVideoArgs.model_construct(start_time=5.0, end_time=2.0, num_frames=None),
        CropVideoArgs.model_construct(start_time=-1.0, end_time=2.0, num_frames=None),
        CropVideoArgs.model_construct(start_time=0.0, end_time=2.0, num_frames=0),
        CropVideoArgs(start_time=0, end_time=2),
    ]
    outputs = reader.crop(real_clips["bikes.mp4"], calls)
    assert [o.ok for o in outputs] == [False, False, False, False, True]
    assert "invalid window" in outputs[0].error and "num_frames" in outputs[3].error


def test_a_turn_with_too_many_calls_answers_the_extra_ones_with_an_error(real_clips):  # type: ignore[no-untyped-def]
    from paravt.tools.crop import MAX_CALLS_PER_TURN

    calls = [CropVideoArgs(start_time=1, end_time=2)] * (MAX_CALLS_PER_TURN + 3)
    outputs = VideoReader().crop(real_clips["bikes.mp4"], calls)
    assert all(o.ok for o in outputs[:MAX_CALLS_PER_TURN])
    assert all("at most" in o.error for o in outputs[MAX_CALLS_PER_TURN:])


def test_the_model_cannot_choose_the_file(real_clips, tmp_path):  # type: ignore[no-untyped-def]
    other = tmp_path / "other.mp4"
    shutil.copy(real_clips["carphone_pristine.mp4"], other)
    call = CropVideoArgs.model_validate({"video_path": str(other), "start_time": 0, "end_time": 2})
    (out,) = VideoReader().crop(real_clips["bikes.mp4"], [call])
    assert out.ok and tuple(out.frames[0].image.shape[-2:]) == (128, 320)  # bikes, not carphone


def test_missing_ffmpeg_libraries_become_a_video_error_naming_the_fix(monkeypatch, real_clips):  # type: ignore[no-untyped-def]
    real_import = builtins.__import__

    def no_ffmpeg(name, globals=None, locals=None, fromlist=(), level=0):  # type: ignore[no-untyped-def]
        if name.startswith("torchcodec"):
            raise OSError("libavutil.so.58: cannot open shared object file: No such file")
        return real_import(name, globals, locals, fromlist, level)

    monkeypatch.setattr(video_module, "_torchcodec_error", None)
    monkeypatch.setattr(builtins, "__import__", no_ffmpeg)
    monkeypatch.setattr(video_module, "_PROBE_CACHE", type(video_module._PROBE_CACHE)())
    with pytest.raises(VideoError, match=r"apt-get install -y ffmpeg") as err:
        probe(real_clips["bikes.mp4"])
    assert "libavutil" in str(err.value)
    (out,) = VideoReader().crop(real_clips["bikes.mp4"], [CropVideoArgs(start_time=0, end_time=1)])
    assert not out.ok and "apt-get install -y ffmpeg" in out.error
