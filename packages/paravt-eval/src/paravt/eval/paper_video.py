"""Frames as the released ParaVT driver picks and sizes them: qwen-vl-utils 0.0.14 `fetch_video`.

The paper's numbers were produced with frames from `qwen_vl_utils.fetch_video` (the driver's
`utils.get_frames` for the overview, `utils.crop_frames` for a crop): which frames, their sizes
(a 640x272 clip: 644x280 overview frames, 336x140 crop frames) and their pixels follow that
library's rules, so `protocol=paper` calls the same library with the same arguments (this is our
code calling it, not a copy of the driver). The frame arrays are converted to uint8 the way the
driver converts them (`numpy.astype(uint8)` of the float resize output), so the JPEG bytes sent are
the driver's.

Failures follow the driver: an overview that cannot be decoded is sent as no frames; a crop that
cannot be decoded returns an error (the driver's `[Error cropping ...]` message). Our one extra
bound: a window with a non-finite time is an error before any decoding.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from typing import Any

from paravt.core import AgentProtocol, CropVideoArgs, Frame, ToolOutput
from paravt.eval.video import local_path

QWEN_VL_UTILS_VERSION = "0.0.14"


def _fetch(element: dict[str, Any]) -> tuple[list[Any], list[float], float]:
    """(uint8 HWC frames, their timestamps in seconds, frames read / fps) from qwen-vl-utils'
    `fetch_video`."""
    import numpy as np
    from qwen_vl_utils.vision_process import fetch_video

    video, metadata = fetch_video(element, return_video_metadata=True)
    fps = float(metadata.get("fps") or 0.0)
    indices = [int(i) for i in metadata.get("frames_indices", [])]
    stamps = [i / fps if fps > 0 else 0.0 for i in indices]
    frames = [t.permute(1, 2, 0).numpy().astype(np.uint8) for t in video]
    if len(stamps) != len(frames):
        stamps = [0.0] * len(frames)
    total = float(metadata.get("total_num_frames") or 0.0)
    return frames, stamps, (total / fps if fps > 0 else 0.0)


def _video_min_pixels() -> int:
    """qwen-vl-utils' default minimum of pixels per video frame (Qwen3-VL's 14-pixel patches)."""
    from qwen_vl_utils import vision_process as vp

    return int(vp.VIDEO_MIN_TOKEN_NUM * (14 * vp.SPATIAL_MERGE_SIZE) ** 2)


def check_qwen_vl_utils() -> None:
    """Raise `ImportError` naming the fix when qwen-vl-utils is missing or another version."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("qwen-vl-utils")
    except PackageNotFoundError:
        raise ImportError(
            f"protocol=paper decodes frames with qwen-vl-utils=={QWEN_VL_UTILS_VERSION}; install "
            f"it: pip install qwen-vl-utils=={QWEN_VL_UTILS_VERSION}"
        ) from None
    if found != QWEN_VL_UTILS_VERSION:
        raise ImportError(
            f"protocol=paper needs qwen-vl-utils=={QWEN_VL_UTILS_VERSION} (its frame sizes are the "
            f"paper's); found {found}: pip install qwen-vl-utils=={QWEN_VL_UTILS_VERSION}"
        )


class PaperCropToolbox:
    """crop_video over one sample's video, as the driver's `utils.crop_frames` reads it.

    Windows arrive as the driver reads them (unvalidated floats: `AgentProtocol.read_calls`);
    qwen-vl-utils clamps them to the video and fails on an empty range, as in the driver."""

    def __init__(self, video_path: str, protocol: AgentProtocol) -> None:
        self.video_path = video_path
        self.crop = protocol.crop

    def _one(self, args: CropVideoArgs) -> ToolOutput:
        start, end = float(args.start_time), float(args.end_time)
        if not (math.isfinite(start) and math.isfinite(end)):
            return ToolOutput.failure(f"window {start!r}..{end!r} is not finite")
        element: dict[str, Any] = {
            "type": "video",
            "video": f"file://{self.video_path}",
            "fps": self.crop.fps or 1.0,
            "min_frames": 1,
            "max_frames": self.crop.max_frames,
            "min_pixels": self.crop.min_pixels,
            "max_pixels": self.crop.max_pixels,
            "video_start": start,
            "video_end": end,
        }
        try:
            images, stamps, _ = _fetch(element)
        except Exception as exc:  # the driver's crop_frames is fail-soft: no frames, an error
            return ToolOutput.failure(f"cannot crop {start:.1f}s-{end:.1f}s: {exc}"[:300])
        if not images:
            return ToolOutput.failure(f"no frames in {start:.1f}s-{end:.1f}s")
        frames = [Frame(img, t) for img, t in zip(images, stamps)]
        return ToolOutput(frames=frames, window_s=(start, end))

    async def execute(self, calls: Sequence[CropVideoArgs]) -> list[ToolOutput]:
        """Every call of the turn, in order, off the event loop (one decode per call, as the
        driver does)."""
        return await asyncio.to_thread(lambda: [self._one(c) for c in calls])


class PaperVideoSource:
    """The overview and crops of `protocol=paper` (see the module docstring)."""

    def __init__(self, protocol: AgentProtocol) -> None:
        check_qwen_vl_utils()
        self.protocol = protocol

    def overview(self, video: str, num_frames: int) -> tuple[float, list[Frame]]:
        path = local_path(video)  # a missing video errors the sample, as in the driver
        element = {"type": "video", "video": f"file://{path}", "nframes": num_frames}
        o = self.protocol.overview
        if o.min_pixels is not None:
            element["min_pixels"] = o.min_pixels
        if o.max_pixels is not None:
            element["max_pixels"] = o.max_pixels
            if o.min_pixels is None:  # qwen-vl-utils refuses a budget under its default minimum
                element["min_pixels"] = min(o.max_pixels, _video_min_pixels())
        try:
            images, stamps, duration = _fetch(element)
        except Exception:  # the driver's get_frames is fail-soft: the question goes without frames
            images, stamps, duration = [], [], 0.0
        return duration, [Frame(img, t) for img, t in zip(images, stamps)]

    def toolbox(self, video: str) -> PaperCropToolbox:
        return PaperCropToolbox(local_path(video), self.protocol)
