"""The installed version of a ParaVT distribution: every package's `__version__` comes from here."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def installed_version(distribution: str) -> str:
    """`distribution`'s installed version (e.g. `installed_version("paravt-rewards")`), or
    "0+unknown" when the package runs from a source tree without an install."""
    try:
        return version(distribution)
    except PackageNotFoundError:
        return "0+unknown"
