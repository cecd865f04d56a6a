"""Moved to `paravt.core.testing.tiny` (its names also exported by `paravt.core.testing`); this old
path still answers every name, with a DeprecationWarning, until a later release removes it."""

from __future__ import annotations

import warnings
from typing import Any

from paravt.core.testing import tiny as _moved

warnings.warn(
    "paravt.core.tiny moved to paravt.core.testing.tiny (or import from paravt.core.testing)",
    DeprecationWarning,
    stacklevel=2,
)


def __getattr__(name: str) -> Any:
    return getattr(_moved, name)
