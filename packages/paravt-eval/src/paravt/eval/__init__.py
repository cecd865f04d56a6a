"""paravt.eval: the lmms-eval plugin, `ask` and `reproduce` for ParaVT."""

from paravt.core import installed_version

__version__ = installed_version("paravt-eval")

__all__ = ["__version__"]
