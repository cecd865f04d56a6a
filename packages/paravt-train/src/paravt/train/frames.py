"""Frames for training, decoded by paravt-tools: overviews, crop_video toolboxes, SFT media parts.

`FrameSource` wraps one shared `paravt.tools` `VideoReader` (its cache lets the n rollouts of a
prompt decode the overview once) configured from the recipe's `video` section.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from paravt.core import CropVideoArgs, Frame, ImagePart, Message, Part, TextPart, render_frames
from paravt.tools import CropConfig, VideoReader
from paravt.train.data import VIDEO_PLACEHOLDER
from paravt.train.recipe import VideoSpec

log = logging.getLogger("paravt.train")


class FrameSource:
    """Overview frames and crop_video toolboxes of a sample's own video (paravt-tools)."""

    def __init__(self, video: VideoSpec) -> None:

        self.spec = video
        self._warned_crop = False
        self.reader = VideoReader(
            CropConfig(
                fps=video.crop_fps,
                max_frames=video.max_crop_frames,
                min_pixels=video.min_pixels,
                max_pixels=video.max_pixels,
            )
        )

    def overview(self, video: Path | str, k: int) -> tuple[list[Frame], float]:
        """`k` frames spread over the whole video, and the video's duration in seconds."""
        info = self.reader.probe(video)
        return self.reader.overview(video, k), float(info.duration_s)

    def toolbox(self, video: Path | str) -> Any:
        """The `crop_video` Toolbox of this video (the model never names a file)."""
        return self.reader.toolbox(video)

    def window(self, video: Path | str, start_s: float, end_s: float, n: int | None) -> list[Frame]:
        """Frames of one window, sampled like a crop_video call (raises on a bad window)."""
        args = CropVideoArgs(start_time=start_s, end_time=end_s, num_frames=n)
        (out,) = self.reader.crop(video, [args])
        if out.error is not None:
            raise ValueError(out.error)
        return out.frames

    def _media(self, part: dict[str, Any]) -> list[Part]:
        path = part.get("_local_path")
        if path is None:
            raise ValueError(f"SFT media part without a resolved file: {part!r:.120}")
        if part.get("type") == "image_url":
            from PIL import Image

            return [ImagePart(Image.open(path).convert("RGB"))]
        video_url = part.get("video_url")
        spec: dict[str, Any] = video_url if isinstance(video_url, dict) else part
        # the first name given a value: a table's struct column gives every part every field,
        # so a part that sets start_time reads video_start=None beside it
        start = _given(spec, "video_start", "start_time")
        end = _given(spec, "video_end", "end_time")
        n = _given(spec, "nframes", "num_frames")
        if start is not None and end is not None:
            frames = self.window(path, float(start), float(end), int(n) if n else None)
        else:
            frames, _ = self.overview(path, int(n) if n else self.spec.overview_frames)
        return render_frames(frames)

    def _placeholder_media(self, example: Any, index: int) -> list[Part]:
        """Frames for the `index`-th `<video>` placeholder of a text message: the example's
        `frames` spec (`start_s`, `end_s`, `num_frames`) picks an overview of the whole video or
        a crop of a window, as `paravt-tools synth` describes its rows."""
        videos = getattr(example, "videos", [])
        if index >= len(videos):
            raise ValueError(
                f"SFT row {example.key}: a message has {index + 1} <video> placeholders but the "
                f"row has {len(videos)} videos; add them to its 'videos' column"
            )
        path = videos[index]
        spec = getattr(example, "frames", None) or {}
        n = spec.get("num_frames")
        start, end = spec.get("start_s"), spec.get("end_s")
        if start is not None and end is not None:
            duration = float(self.reader.probe(path).duration_s)
            if float(start) > 0.0 or float(end) < duration - 1e-3:
                if n and int(n) > self.spec.max_crop_frames and not self._warned_crop:
                    self._warned_crop = True
                    log.warning(
                        "SFT row %s: its crop shows %d frames but video.max_crop_frames is %d, "
                        "so its text may describe frames the model is not shown; generate the "
                        "data with crop_max_frames = video.max_crop_frames",
                        example.key,
                        int(n),
                        self.spec.max_crop_frames,
                    )
                return render_frames(self.window(path, float(start), float(end), n and int(n)))
        frames, _ = self.overview(path, int(n) if n else self.spec.overview_frames)
        return render_frames(frames)

    def messages_of(self, example: Any) -> list[Message]:
        """An `SFTExample`'s chat as core messages, every video part (a `video_url` part, or a
        `<video>` placeholder in the text of a non-assistant message) replaced by its frames, each
        preceded by its timestamp, as the agent runtime shows them."""
        out: list[Message] = []
        placeholders = 0
        for m in example.messages:
            content = m["content"]
            if isinstance(content, str):
                if m["role"] == "assistant" or VIDEO_PLACEHOLDER not in content:
                    out.append(Message(m["role"], content))
                    continue
                pieces = content.split(VIDEO_PLACEHOLDER)
                text_parts: list[Part] = [TextPart(pieces[0])] if pieces[0] else []
                for piece in pieces[1:]:
                    text_parts += self._placeholder_media(example, placeholders)
                    placeholders += 1
                    if piece:
                        text_parts.append(TextPart(piece))
                out.append(Message(m["role"], text_parts))
                continue
            parts: list[Part] = []
            for part in content:
                if not isinstance(part, dict):
                    continue
                if part.get("type") == "text" or ("text" in part and "type" not in part):
                    parts.append(TextPart(str(part.get("text", ""))))
                elif part.get("type") in ("video_url", "image_url", "video"):
                    parts.extend(self._media(part))
            if m["role"] == "assistant":
                out.append(
                    Message("assistant", "".join(p.text for p in parts if isinstance(p, TextPart)))
                )
            else:
                out.append(Message(m["role"], parts))
        return out


def _given(spec: dict[str, Any], *names: str) -> Any:
    """The value of the first of `names` that `spec` gives (not None), else None."""
    return next((spec[n] for n in names if spec.get(n) is not None), None)
