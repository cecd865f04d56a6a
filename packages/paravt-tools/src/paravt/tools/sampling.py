"""Which frames to show, and at what size: the overview and crop policies, and the Qwen3-VL resize rule.

Policies work on the frame grid of a `VideoInfo` (frame `i` shown from `begin_s + i / fps`), so they
return real frames: indices that are inside the window, sorted and unique, with their timestamps.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import torch

PATCH_SIZE = 16
MERGE_SIZE = 2
RESIZE_FACTOR = PATCH_SIZE * MERGE_SIZE  # Qwen3-VL: sides are multiples of 32
MIN_PIXELS = 784  # the reference sub-agent's pixel budget per frame
MAX_PIXELS = 50176
MAX_ASPECT_RATIO = 200.0
MAX_OVERVIEW_FRAMES = 1024


class FrameGrid(Protocol):
    """What sampling reads of a video (read-only, so frozen `VideoInfo` satisfies it)."""

    @property
    def duration_s(self) -> float: ...
    @property
    def fps(self) -> float: ...
    @property
    def num_frames(self) -> int: ...
    @property
    def begin_s(self) -> float: ...


@dataclass(frozen=True)
class Sample:
    """Frames chosen from a window: their indices and nominal timestamps, plus the clamped window."""

    indices: tuple[int, ...]
    timestamps_s: tuple[float, ...]
    window_s: tuple[float, float]


def smart_resize(
    height: int,
    width: int,
    *,
    min_pixels: int = MIN_PIXELS,
    max_pixels: int = MAX_PIXELS,
    factor: int = RESIZE_FACTOR,
) -> tuple[int, int]:
    """The (height, width) Qwen3-VL feeds a `height` x `width` frame at this pixel budget.

    Sides are rounded to multiples of `factor` (patch 16 x merge 2); if that exceeds `max_pixels`
    both sides are scaled down (floored), if it is below `min_pixels` scaled up (ceiled); the aspect
    ratio is kept as well as the rounding allows. Raises `ValueError` for non-positive sizes, an
    empty budget, or an aspect ratio above 200.
    """
    if height <= 0 or width <= 0:
        raise ValueError(f"frame size must be positive, got {height}x{width} (height x width)")
    if min_pixels <= 0 or max_pixels < min_pixels:
        raise ValueError(
            f"pixel budget must satisfy 0 < min_pixels <= max_pixels, got {min_pixels}..{max_pixels}"
        )
    if max_pixels < factor * factor:
        raise ValueError(f"max_pixels {max_pixels} is below one {factor}x{factor} patch group")
    ratio = max(height, width) / min(height, width)
    if ratio > MAX_ASPECT_RATIO:
        raise ValueError(
            f"aspect ratio {ratio:.0f}:1 of a {width}x{height} frame is above {MAX_ASPECT_RATIO:.0f}:1;"
            " crop or pad the video first"
        )
    h_bar = max(factor, round(height / factor) * factor)
    w_bar = max(factor, round(width / factor) * factor)
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def resize_frames(
    frames: torch.Tensor, *, min_pixels: int = MIN_PIXELS, max_pixels: int = MAX_PIXELS
) -> torch.Tensor:
    """Resize uint8 frames `(T, C, H, W)` (or one `(C, H, W)`) to the `smart_resize` size.

    Bilinear with antialiasing, as the crop tool resizes decoded frames; uint8 in and out.
    """
    import torch
    import torch.nn.functional as F

    if frames.dtype != torch.uint8:
        raise ValueError(f"resize_frames expects uint8 frames, got {frames.dtype}")
    single = frames.dim() == 3
    batch = frames.unsqueeze(0) if single else frames
    if batch.dim() != 4:
        raise ValueError(
            f"resize_frames expects (T, C, H, W) or (C, H, W), got {tuple(frames.shape)}"
        )
    h, w = smart_resize(
        int(batch.shape[-2]), int(batch.shape[-1]), min_pixels=min_pixels, max_pixels=max_pixels
    )
    if (h, w) != tuple(batch.shape[-2:]):
        batch = F.interpolate(batch, size=(h, w), mode="bilinear", antialias=True)
    return batch[0] if single else batch


def frame_count_for(
    duration_s: float,
    *,
    fps: float = 1.0,
    min_frames: int = 1,
    max_frames: int = 16,
    num_frames: int | None = None,
) -> int:
    """How many frames a window of `duration_s` gets: `num_frames` if given, else `duration * fps`,
    rounded, both bounded to `[min_frames, max_frames]`."""
    wanted = num_frames if num_frames is not None else math.floor(duration_s * fps + 0.5)
    return max(min_frames, min(max_frames, wanted))


def _spread(lo: int, hi: int, n: int) -> list[int]:
    """`n` indices spread evenly over `[lo, hi]` (centres of `n` equal parts), sorted and unique."""
    count = hi - lo + 1
    if n >= count:
        return list(range(lo, hi + 1))
    return [lo + math.floor((k + 0.5) * count / n) for k in range(n)]


def clamp_window(grid: FrameGrid, start_s: float, end_s: float) -> tuple[float, float] | None:
    """The window intersected with `[0, duration]`, or None when nothing of it is left."""
    start, end = max(0.0, start_s), min(end_s, grid.duration_s)
    if end <= start:
        return None
    return start, end


def window_indices(grid: FrameGrid, start_s: float, end_s: float) -> tuple[int, int]:
    """First and last frame whose timestamp lies in `[start_s, end_s]`.

    A window shorter than one frame period may contain no timestamp; it then gets the one frame on
    screen at `start_s`.
    """
    eps = 1e-6
    last = grid.num_frames - 1
    lo = max(0, math.ceil((start_s - grid.begin_s) * grid.fps - eps))
    hi = min(last, math.floor((end_s - grid.begin_s) * grid.fps + eps))
    if hi < lo:
        lo = hi = min(last, max(0, math.floor((start_s - grid.begin_s) * grid.fps + eps)))
    return lo, hi


def sample_window(grid: FrameGrid, start_s: float, end_s: float, n: int) -> Sample:
    """`n` frames spread evenly over `[start_s, end_s]` (already clamped), fewer if the window holds
    fewer frames."""
    if n < 1:
        raise ValueError(f"number of frames must be at least 1, got {n}")
    lo, hi = window_indices(grid, start_s, end_s)
    indices = _spread(lo, hi, n)
    times = tuple(grid.begin_s + i / grid.fps for i in indices)
    return Sample(tuple(indices), times, (start_s, end_s))


MAX_KEYFRAME_SNAP = 0.5


def overview_sample(
    grid: FrameGrid,
    num_frames: int,
    *,
    keyframes: Sequence[int] | None = None,
    keyframe_snap: float = 0.0,
) -> Sample:
    """The overview: `num_frames` frames spread uniformly over the whole video.

    With `keyframes` (sorted frame indices) and `keyframe_snap` > 0, each frame moves to the
    nearest keyframe if one lies within `keyframe_snap` x the frame spacing (`count / num_frames`
    frames) of its uniform position; otherwise it stays. A keyframe decodes on its own, so on
    videos with sparse keyframes this removes most of the decoding. With `keyframe_snap` = 0.25
    every frame is within a quarter spacing of its uniform position, so consecutive gaps lie in
    0.5..1.5 spacings. Snapping is skipped (uniform frames returned) when the spacing is under two
    frames or when it would not keep the frames strictly increasing. Raises `ValueError` for
    `num_frames` outside 1..1024 or `keyframe_snap` outside 0..0.5.
    """
    if not 1 <= num_frames <= MAX_OVERVIEW_FRAMES:
        raise ValueError(
            f"overview num_frames must be in 1..{MAX_OVERVIEW_FRAMES}, got {num_frames}"
        )
    if not 0.0 <= keyframe_snap <= MAX_KEYFRAME_SNAP:
        raise ValueError(
            f"keyframe_snap must be in 0..{MAX_KEYFRAME_SNAP} (a fraction of the frame spacing), "
            f"got {keyframe_snap}"
        )
    sample = sample_window(grid, 0.0, grid.duration_s, num_frames)
    if not keyframes or keyframe_snap <= 0.0:
        return sample
    lo, hi = window_indices(grid, 0.0, grid.duration_s)
    spacing = (hi - lo + 1) / num_frames
    tolerance = keyframe_snap * spacing
    if spacing < 2.0 or tolerance < 1.0:
        return sample
    snapped: list[int] = []
    for i in sample.indices:
        at = bisect.bisect_left(keyframes, i)
        near = [keyframes[j] for j in (at - 1, at) if 0 <= j < len(keyframes)]
        best = min(near, key=lambda k: (abs(k - i), k))
        choice = best if abs(best - i) <= tolerance and lo <= best <= hi else i
        if snapped and choice <= snapped[-1]:
            return sample
        snapped.append(choice)
    times = tuple(grid.begin_s + i / grid.fps for i in snapped)
    return Sample(tuple(snapped), times, sample.window_s)


def crop_sample(
    grid: FrameGrid,
    start_s: float,
    end_s: float,
    *,
    fps: float = 1.0,
    min_frames: int = 1,
    max_frames: int = 16,
    num_frames: int | None = None,
) -> Sample | None:
    """The crop: frames in the clamped window at `fps` (or exactly `num_frames`), bounded to
    `[min_frames, max_frames]`. None when the window lies outside the video."""
    window = clamp_window(grid, start_s, end_s)
    if window is None:
        return None
    n = frame_count_for(
        window[1] - window[0],
        fps=fps,
        min_frames=min_frames,
        max_frames=max_frames,
        num_frames=num_frames,
    )
    return sample_window(grid, window[0], window[1], n)


def overview_timestamps(
    grid: FrameGrid,
    num_frames: int,
    *,
    keyframes: Sequence[int] | None = None,
    keyframe_snap: float = 0.0,
) -> list[float]:
    """Timestamps (seconds) of the overview's frames: sorted, unique, inside the video (see
    `overview_sample` for the optional snapping to keyframes)."""
    sample = overview_sample(grid, num_frames, keyframes=keyframes, keyframe_snap=keyframe_snap)
    return list(sample.timestamps_s)


def crop_timestamps(
    grid: FrameGrid,
    start_s: float,
    end_s: float,
    *,
    fps: float = 1.0,
    min_frames: int = 1,
    max_frames: int = 16,
    num_frames: int | None = None,
) -> list[float]:
    """Timestamps (seconds) the crop of `[start_s, end_s]` shows: sorted, unique, in the window
    (empty when the window lies outside the video)."""
    sample = crop_sample(
        grid,
        start_s,
        end_s,
        fps=fps,
        min_frames=min_frames,
        max_frames=max_frames,
        num_frames=num_frames,
    )
    return [] if sample is None else list(sample.timestamps_s)
