"""Where a sample's frames come from: the overview and a crop_video toolbox over the sample's
own video, sampled as the run's protocol says (the paper's qwen-vl-utils sampling, or paravt-tools'
reader and crop tool)."""

from __future__ import annotations

from typing import Protocol

from paravt.core import AgentProtocol, Frame, Toolbox
from paravt.eval.config import EvalConfig
from paravt.eval.paper_video import PaperVideoSource
from paravt.eval.video import ToolsVideoSource


class VideoSource(Protocol):
    """Where a sample's frames come from: its overview, and a crop_video toolbox over it."""

    def overview(self, video: str, num_frames: int) -> tuple[float, list[Frame]]:
        """(duration in seconds, `num_frames` frames spread over the whole video)."""
        ...

    def toolbox(self, video: str) -> Toolbox:
        """The crop_video toolbox over this sample's own video."""
        ...


def default_source(config: EvalConfig, protocol: AgentProtocol) -> VideoSource:
    """Frames as the protocol samples them: qwen-vl-utils 0.0.14 for the paper's, else
    paravt-tools' reader and crop_video tool."""
    if protocol.overview.sampling == "qwen_vl_utils_0.0.14":
        return PaperVideoSource(protocol)

    crop = protocol.crop  # the config's max_pixels / max_crop_frames are folded in already
    return ToolsVideoSource(
        max_pixels=crop.max_pixels,
        max_crop_frames=crop.max_frames,
        fps=crop.fps,
        min_pixels=crop.min_pixels,
    )
