"""Opening and probing videos with torchcodec, with errors that name the file and the fix.

torchcodec is imported lazily: importing `paravt.tools` works without FFmpeg, and the first decode
turns a missing FFmpeg into a `VideoError` that says `apt-get install ffmpeg`.
"""

from __future__ import annotations

import math
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FFMPEG_FIX = (
    "torchcodec needs the FFmpeg shared libraries (versions 4-7): install them with "
    "`apt-get install -y ffmpeg` (Debian/Ubuntu) or `conda install -c conda-forge 'ffmpeg<8'`"
)


class VideoError(Exception):
    """A video could not be opened or decoded. The message names the file and what to do."""


_torchcodec_error: str | None = None


def torchcodec_decoders() -> Any:
    """The `torchcodec.decoders` module, or a `VideoError` naming the fix when FFmpeg is missing."""
    global _torchcodec_error
    if _torchcodec_error is not None:
        raise VideoError(_torchcodec_error)
    try:
        from torchcodec import decoders
    except (ImportError, OSError, RuntimeError) as exc:
        _torchcodec_error = (
            f"cannot load torchcodec ({type(exc).__name__}: {str(exc).splitlines()[0][:300]}). "
            f"{FFMPEG_FIX}"
        )
        raise VideoError(_torchcodec_error) from exc
    return decoders


@dataclass(frozen=True)
class VideoInfo:
    """What `probe` learns about a video: its frame grid, size and codec.

    Frame `i` is shown from `begin_s + i / fps`; `duration_s` is the length of the video stream.
    """

    path: str
    duration_s: float
    fps: float
    num_frames: int
    width: int
    height: int
    codec: str
    begin_s: float = 0.0

    def frame_time_s(self, index: int) -> float:
        """Nominal presentation time of frame `index` (constant frame rate assumed)."""
        return self.begin_s + index / self.fps


def _file_identity(path: str | os.PathLike[str]) -> tuple[str, int, int]:
    """(real path, size, mtime) of an existing regular file, or a `VideoError` saying what is wrong."""
    p = Path(path)
    if not p.exists():
        raise VideoError(f"video {str(path)!r} does not exist; check the path (and the data root)")
    if p.is_dir():
        raise VideoError(f"video {str(path)!r} is a directory, not a video file")
    st = p.stat()
    if st.st_size == 0:
        raise VideoError(f"video {str(path)!r} is empty (0 bytes); re-download or re-encode it")
    return str(p.resolve()), st.st_size, st.st_mtime_ns


def _describe(exc: BaseException) -> str:
    """torchcodec's messages start with a C++ source location; keep the human part."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text.rsplit(", ", 1)[-1] if "SingleStreamDecoder" in text or ".cpp:" in text else text


def open_decoder(
    path: str | os.PathLike[str],
    *,
    size: tuple[int, int] | None = None,
    num_threads: int = 1,
) -> Any:
    """A torchcodec `VideoDecoder` for `path` in approximate seek mode (no full-file scan).

    `size=(height, width)` resizes every returned frame inside FFmpeg (bilinear, antialiased), so
    only the frames we keep are converted and scaled. Raises `VideoError` for unreadable files.
    """
    decoders = torchcodec_decoders()
    transforms = None
    if size is not None:
        from torchcodec.transforms import Resize

        transforms = [Resize(size)]
    try:
        return decoders.VideoDecoder(
            str(path),
            seek_mode="approximate",
            num_ffmpeg_threads=num_threads,
            dimension_order="NCHW",
            transforms=transforms,
        )
    except ValueError as exc:
        if "video stream" in str(exc):
            raise VideoError(
                f"{str(path)!r} has no video stream (audio only?); give a file with a video track"
            ) from exc
        raise VideoError(f"{str(path)!r} cannot be opened as a video: {_describe(exc)}") from exc
    except RuntimeError as exc:
        raise VideoError(
            f"{str(path)!r} is not a readable video ({_describe(exc)}); the file may be truncated, "
            "corrupt or not a video: re-download or re-encode it"
        ) from exc


def _probe_uncached(path: str, verify: bool) -> VideoInfo:
    decoder = open_decoder(path)
    meta = decoder.metadata
    fps = meta.average_fps
    if not fps or not math.isfinite(fps) or fps <= 0:
        raise VideoError(f"{path!r} has no usable frame rate in its header; re-encode it")
    duration = meta.duration_seconds
    num_frames = meta.num_frames
    if num_frames is None and duration:
        num_frames = round(duration * fps)
    if not num_frames or num_frames <= 0:
        raise VideoError(f"{path!r} contains no video frames")
    if not duration or not math.isfinite(duration) or duration <= 0:
        duration = num_frames / fps
    info = VideoInfo(
        path=path,
        duration_s=float(duration),
        fps=float(fps),
        num_frames=int(num_frames),
        width=int(meta.width),
        height=int(meta.height),
        codec=str(meta.codec),
        begin_s=float(meta.begin_stream_seconds or 0.0),
    )
    if verify:
        # The first and last frames: a truncated file often opens but cannot reach its end.
        last = info.num_frames - 1
        times = [info.frame_time_s(0) + 0.5 / fps, info.frame_time_s(last) + 0.5 / fps]
        try:
            decoder.get_frames_played_at(times)
        except (RuntimeError, IndexError, ValueError) as exc:
            raise VideoError(
                f"{path!r} is truncated or corrupt: frames up to {info.duration_s:.1f} s are "
                f"announced but cannot be decoded ({_describe(exc)}); re-download or re-encode it"
            ) from exc
    return info


_PROBE_CACHE: OrderedDict[tuple[str, int, int, bool], VideoInfo] = OrderedDict()
_PROBE_LOCK = threading.Lock()
_PROBE_CACHE_SIZE = 4096


def probe(path: str | os.PathLike[str], *, verify: bool = True) -> VideoInfo:
    """Duration, fps, frame count, size and codec of the video at `path`.

    With `verify` (default) the first and last frames are decoded, so a truncated file is caught
    here rather than mid-episode. Results are cached per (file, size, mtime). Raises `VideoError`
    for a missing file, a directory, an empty, non-video or truncated file, a file without a video
    stream, or missing FFmpeg libraries.
    """
    real, size, mtime = _file_identity(path)
    key = (real, size, mtime, verify)
    with _PROBE_LOCK:
        if key in _PROBE_CACHE:
            _PROBE_CACHE.move_to_end(key)
            return _PROBE_CACHE[key]
    info = _probe_uncached(real, verify)
    with _PROBE_LOCK:
        _PROBE_CACHE[key] = info
        while len(_PROBE_CACHE) > _PROBE_CACHE_SIZE:
            _PROBE_CACHE.popitem(last=False)
    return info


_KEYFRAME_CACHE: OrderedDict[tuple[str, int, int], tuple[int, ...] | None] = OrderedDict()
_KEYFRAME_CACHE_SIZE = 256


def keyframe_indices(info: VideoInfo) -> tuple[int, ...] | None:
    """Frame indices (on `info`'s frame grid, sorted) of the video's keyframes, or None if unknown.

    A keyframe decodes without reference frames, so showing it costs one frame of decoding instead
    of everything since the previous keyframe. The list comes from torchcodec's exact-mode scan of
    the packet index (no decoding; ~45 ms for 10 minutes of 640x272 H.264) through
    `VideoDecoder._get_key_frame_indices` (torchcodec 0.17; a missing or failing method gives None,
    and callers fall back to frames at their nominal positions). Cached per (file, size, mtime).
    """
    key = video_key(info)
    with _PROBE_LOCK:
        if key in _KEYFRAME_CACHE:
            _KEYFRAME_CACHE.move_to_end(key)
            return _KEYFRAME_CACHE[key]
    decoders = torchcodec_decoders()
    result: tuple[int, ...] | None
    try:
        decoder = decoders.VideoDecoder(info.path, seek_mode="exact")
        raw = decoder._get_key_frame_indices().tolist()
        result = tuple(sorted({int(i) for i in raw if 0 <= int(i) < info.num_frames})) or None
    except (AttributeError, RuntimeError, ValueError, TypeError):
        result = None
    with _PROBE_LOCK:
        _KEYFRAME_CACHE[key] = result
        while len(_KEYFRAME_CACHE) > _KEYFRAME_CACHE_SIZE:
            _KEYFRAME_CACHE.popitem(last=False)
    return result


def clear_metadata_caches() -> None:
    """Forget cached `probe` results and keyframe lists (benchmarks use this to measure cold)."""
    with _PROBE_LOCK:
        _PROBE_CACHE.clear()
        _KEYFRAME_CACHE.clear()


def video_key(info: VideoInfo) -> tuple[str, int, int]:
    """A cache key that changes when the file changes."""
    real, size, mtime = _file_identity(info.path)
    return real, size, mtime
