"""Shared fixtures of paravt-core's tests: the tiny Qwen3-VL, built once and cached."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_model_path(request: pytest.FixtureRequest) -> Path:
    """The tiny Qwen3-VL (seed 0), cached across sessions in $PARAVT_CACHE_DIR or pytest's cache."""
    from paravt.core.tiny import cached_tiny_qwen3vl

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    env = os.environ.get("PARAVT_CACHE_DIR")
    if env:
        cache = Path(env)
    elif getattr(request.config, "cache", None) is not None:
        cache = Path(request.config.cache.mkdir("paravt-tiny-models"))
    else:  # pytest -p no:cacheprovider
        cache = Path.home() / ".cache" / "paravt"
    return cached_tiny_qwen3vl(seed=0, cache_dir=cache)


@pytest.fixture(scope="session")
def hf_engine(tiny_model_path: Path):  # type: ignore[no-untyped-def]
    """One HFEngine over the tiny model for the whole session (tests must not train it)."""
    from paravt.core.engines.hf import HFEngine

    return HFEngine(tiny_model_path)
