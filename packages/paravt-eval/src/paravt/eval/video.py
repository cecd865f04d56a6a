"""The default `VideoSource`: paravt-tools' decoder (overview) and its `crop_video` toolbox.

The video path always comes from the benchmark sample (or the `ask` command line), never from the
model; `file://` URIs are accepted.
"""

from __future__ import annotations

from pathlib import Path

from paravt.core import Frame, Toolbox
from paravt.tools import CropConfig, VideoReader, default_reader


def local_path(video: str) -> str:
    """A sample's video as a local path; raises `FileNotFoundError` naming it when missing."""
    path = Path(video.removeprefix("file://")).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"video {video!r} does not exist (is the dataset downloaded?)")
    return str(path)


class ToolsVideoSource:
    """Overview frames and crop toolboxes from one shared `paravt.tools` reader.

    `max_pixels` / `min_pixels` bound every frame's pixel count (overview and crops),
    `max_crop_frames` the frames of one crop and `fps` the crop's frame rate; None keeps the tool's
    reference values (784..50176 pixels per frame, 16 frames per crop, 1 fps). With every value at
    the reference, the process-wide default reader (and its frame cache) is shared.
    """

    def __init__(
        self,
        max_pixels: int | None = None,
        max_crop_frames: int | None = None,
        *,
        fps: float | None = None,
        min_pixels: int | None = None,
    ) -> None:

        base = CropConfig()
        wanted = CropConfig(
            fps=base.fps if fps is None else fps,
            max_frames=base.max_frames if max_crop_frames is None else max_crop_frames,
            min_pixels=min(
                base.min_pixels if min_pixels is None else min_pixels,
                base.max_pixels if max_pixels is None else max_pixels,
            ),
            max_pixels=base.max_pixels if max_pixels is None else max_pixels,
        )
        self.reader = default_reader() if wanted == base else VideoReader(wanted)

    def overview(self, video: str, num_frames: int) -> tuple[float, list[Frame]]:
        path = local_path(video)
        info = self.reader.probe(path)
        return info.duration_s, self.reader.overview(path, num_frames)

    def toolbox(self, video: str) -> Toolbox:
        return self.reader.toolbox(local_path(video))
