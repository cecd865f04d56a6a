"""paravt.train: Cold-start SFT and PARA-GRPO RL trainers for ParaVT (skeleton)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("paravt-train")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0+unknown"

__all__ = ["__version__"]
