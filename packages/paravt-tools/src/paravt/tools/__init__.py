"""paravt.tools: fast, safe temporal cropping (`crop_video`) and synthetic long-video tasks.

Decoding uses torchcodec (FFmpeg); torch and torchcodec are imported when frames are decoded.
"""

from paravt.core import installed_version
from paravt.tools.crop import (
    CacheStats,
    CropConfig,
    CropVideoTool,
    FrameCache,
    VideoReader,
    default_reader,
    frames_tensor,
    read_overview,
)
from paravt.tools.sampling import (
    MAX_PIXELS,
    MIN_PIXELS,
    Sample,
    crop_sample,
    crop_timestamps,
    overview_sample,
    overview_timestamps,
    resize_frames,
    smart_resize,
)
from paravt.tools.synth import SynthConfig, SynthResult, generate
from paravt.tools.video import VideoError, VideoInfo, keyframe_indices, probe

__version__ = installed_version("paravt-tools")

__all__ = [
    "MAX_PIXELS",
    "MIN_PIXELS",
    "CacheStats",
    "CropConfig",
    "CropVideoTool",
    "FrameCache",
    "Sample",
    "SynthConfig",
    "SynthResult",
    "VideoError",
    "VideoInfo",
    "VideoReader",
    "__version__",
    "crop_sample",
    "crop_timestamps",
    "default_reader",
    "frames_tensor",
    "generate",
    "keyframe_indices",
    "overview_sample",
    "overview_timestamps",
    "probe",
    "read_overview",
    "resize_frames",
    "smart_resize",
]
