"""Moved to `paravt.core.testing.stand_in_model`; this old path re-exports it, with a
DeprecationWarning, until a later release removes it."""

from __future__ import annotations

import warnings

from paravt.core.testing.stand_in_model import Batcher, FakeSGLang

__all__ = ["Batcher", "FakeSGLang"]

warnings.warn(
    "paravt.core.stand_in_model moved to paravt.core.testing.stand_in_model",
    DeprecationWarning,
    stacklevel=2,
)
