"""One log line per step of a reproduce run, with the time since the run started."""

from __future__ import annotations

import time

_T0 = time.perf_counter()


def restart_clock() -> None:
    global _T0
    _T0 = time.perf_counter()


def log(msg: str) -> None:
    elapsed = time.perf_counter() - _T0
    print(f"[reproduce {elapsed / 60:5.1f} min] {msg}", flush=True)
