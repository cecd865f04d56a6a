"""paravt.rewards: PARA-GRPO rewards, nFrames Gating and GRPO advantage math; light (no torch), with TRL/verl/AReaL/OpenRLHF adapters."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("paravt-rewards")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0+unknown"

__all__ = ["__version__"]
