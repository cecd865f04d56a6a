"""paravt.train: cold-start SFT and PARA-GRPO RL trainers for ParaVT tool-native video models.

The public API (other packages import only these; each loads torch and transformers on first use,
so `import paravt.train` stays light):

- recipes: `load_recipe`, `SFTRecipe`, `RLRecipe`, `RecipeError`, `RECIPE_NAMES`;
- trainers: `train_sft`, `train_rl`; `evaluate_rl` (held-out accuracy and tool statistics of a
  checkpoint under an RL recipe) and `load_rl_examples`;
- `trained_protocol` (the agent protocol a checkpoint was trained under);
- `miniature`: the miniature experiments (the learning test, `paravt-eval reproduce`).

The modules behind them (`rl/`, `sft.py`, `distributed.py`, ...) are the layout, not the interface.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from paravt.core import installed_version

__version__ = installed_version("paravt-train")

if TYPE_CHECKING:  # pragma: no cover
    from paravt.train import miniature
    from paravt.train.protocol import trained_protocol
    from paravt.train.recipe import RECIPE_NAMES, RecipeError, RLRecipe, SFTRecipe, load_recipe
    from paravt.train.rl import evaluate as evaluate_rl
    from paravt.train.rl import load_rl_examples, train_rl
    from paravt.train.sft import train_sft

# name -> (module, attribute); looked up on every access, so a test's monkeypatch of the module's
# attribute is seen
_LAZY = {
    "load_recipe": ("paravt.train.recipe", "load_recipe"),
    "SFTRecipe": ("paravt.train.recipe", "SFTRecipe"),
    "RLRecipe": ("paravt.train.recipe", "RLRecipe"),
    "RecipeError": ("paravt.train.recipe", "RecipeError"),
    "RECIPE_NAMES": ("paravt.train.recipe", "RECIPE_NAMES"),
    "train_sft": ("paravt.train.sft", "train_sft"),
    "train_rl": ("paravt.train.rl", "train_rl"),
    "evaluate_rl": ("paravt.train.rl", "evaluate"),
    "load_rl_examples": ("paravt.train.rl", "load_rl_examples"),
    "trained_protocol": ("paravt.train.protocol", "trained_protocol"),
    "miniature": ("paravt.train.miniature", None),
}

__all__ = [
    "RECIPE_NAMES",
    "RLRecipe",
    "RecipeError",
    "SFTRecipe",
    "__version__",
    "evaluate_rl",
    "load_recipe",
    "load_rl_examples",
    "miniature",
    "train_rl",
    "train_sft",
    "trained_protocol",
]
assert set(__all__) == {"__version__", *_LAZY}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'paravt.train' has no attribute {name!r}")
    module_name, attribute = _LAZY[name]
    module = importlib.import_module(module_name)
    return module if attribute is None else getattr(module, attribute)
