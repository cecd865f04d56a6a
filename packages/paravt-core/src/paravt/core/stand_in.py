"""Moved to `paravt.core.testing.stand_in`; this old path re-exports it, and
`python -m paravt.core.stand_in` still serves, with a DeprecationWarning, until a later release
removes it."""

from __future__ import annotations

import warnings

from paravt.core.testing.stand_in import (
    FLUSH_TEXT,
    ROUTES,
    FakeChatServer,
    PlainText,
    Route,
    ScriptedChat,
    StandInServer,
    assistant_turns,
    main,
    serve,
    spawn,
)

__all__ = [
    "FLUSH_TEXT",
    "ROUTES",
    "FakeChatServer",
    "PlainText",
    "Route",
    "ScriptedChat",
    "StandInServer",
    "assistant_turns",
    "main",
    "serve",
    "spawn",
]

warnings.warn(
    "paravt.core.stand_in moved to paravt.core.testing.stand_in "
    "(python -m paravt.core.testing.stand_in)",
    DeprecationWarning,
    stacklevel=1 if __name__ == "__main__" else 2,
)

if __name__ == "__main__":
    main()
