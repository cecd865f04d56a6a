"""Moved to `paravt.core.testing.stand_in_model`; this old path still answers every name, with a
DeprecationWarning, until a later release removes it."""

from __future__ import annotations

import warnings
from typing import Any

from paravt.core.testing import stand_in_model as _moved

warnings.warn(
    "paravt.core.stand_in_model moved to paravt.core.testing.stand_in_model",
    DeprecationWarning,
    stacklevel=2,
)


def __getattr__(name: str) -> Any:
    return getattr(_moved, name)
