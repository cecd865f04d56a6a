"""paravt.eval: lmms-eval plugin, `ask` and `reproduce` for ParaVT (skeleton)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("paravt-eval")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0+unknown"

__all__ = ["__version__"]
