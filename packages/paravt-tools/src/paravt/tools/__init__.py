"""paravt.tools: Fast, safe temporal cropping (crop_video) and synthetic long-video tasks for ParaVT."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("paravt-tools")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0+unknown"

__all__ = ["__version__"]
