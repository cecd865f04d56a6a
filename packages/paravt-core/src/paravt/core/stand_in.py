"""Moved to `paravt.core.testing.stand_in`; this old path still answers every name, and
`python -m paravt.core.stand_in` still serves, with a DeprecationWarning, until a later release
removes it."""

from __future__ import annotations

import warnings
from typing import Any

from paravt.core.testing import stand_in as _moved

warnings.warn(
    "paravt.core.stand_in moved to paravt.core.testing.stand_in "
    "(python -m paravt.core.testing.stand_in)",
    DeprecationWarning,
    stacklevel=1 if __name__ == "__main__" else 2,
)


def __getattr__(name: str) -> Any:
    return getattr(_moved, name)


if __name__ == "__main__":
    _moved.main()
