"""Shared fixtures of paravt-core's tests: the tiny Qwen3-VL, built once and cached."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_model_path() -> Path:
    """The tiny Qwen3-VL (seed 0), built once into $PARAVT_CACHE_DIR or ~/.cache/paravt."""
    from paravt.core.testing import cached_tiny_qwen3vl

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return cached_tiny_qwen3vl(seed=0)


@pytest.fixture(scope="session")
def hf_engine(tiny_model_path: Path):  # type: ignore[no-untyped-def]
    """One HFEngine over the tiny model for the whole session (tests must not train it)."""
    from paravt.core.engines.hf import HFEngine

    return HFEngine(tiny_model_path)
