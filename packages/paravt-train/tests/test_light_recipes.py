"""Recipes load without the trainer (issue 46, item 1): with torch, transformers, torchvision,
torchcodec and the RL trainer (`paravt.train.rl` and everything under it) blocked from importing,
every shipped recipe loads and validates, the built-in engines still judge their `rollout`
settings (their checks live in `paravt.train.engine_checks`, not in the engine classes' modules)
and `paravt-train doctor`'s recipe checks run. Run in a fresh interpreter, so nothing this test
session imported already hides an import."""

from __future__ import annotations

import subprocess
import sys
import textwrap

BLOCKER = """
import importlib.abc
import sys

BLOCKED = ("torch", "transformers", "torchvision", "torchcodec", "paravt.train.rl")


class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + ".") for b in BLOCKED):
            raise ImportError(f"blocked by the test: {name}")
        return None


sys.meta_path.insert(0, Blocker())
"""

CHECKS = """
from importlib import resources

from paravt.train import doctor
from paravt.train.recipe import RECIPE_NAMES, RecipeError, RLRecipe, load_recipe

# the blocker works: the trainer and torch cannot be imported here
for name in ("torch", "paravt.train.rl", "paravt.train.rl.engines.hf"):
    try:
        __import__(name)
    except ImportError:
        pass
    else:
        raise SystemExit(f"the blocker let {name} through")

shipped = sorted(
    p.name.removesuffix(".yaml")
    for p in (resources.files("paravt.train") / "recipes").iterdir()
    if p.name.endswith(".yaml")
)
assert shipped == sorted(RECIPE_NAMES), (shipped, RECIPE_NAMES)

asked = []
doctor.check_servers = lambda urls, timeout_s=5.0: asked.extend(urls) or []  # no network
for name in shipped:
    recipe = load_recipe(name)
    doctor.gpu_needs(recipe)
    doctor.check_paths(recipe)
    urls = doctor.recipe_urls(name, [])
    if isinstance(recipe, RLRecipe) and recipe.rollout.engine == "sglang_server":
        assert urls == list(recipe.rollout.server.urls), (name, urls)
    else:
        assert urls == [], (name, urls)
    doctor.run(recipe=name)  # the stack check reports torch missing, as a finding
print("asked servers:", asked)


def refused(overrides, expected):
    try:
        load_recipe("tiny_paragrpo", overrides)
    except RecipeError as exc:
        assert expected in str(exc), (overrides, str(exc))
        return
    raise SystemExit(f"{overrides} loaded, expected {expected!r}")


# each built-in engine still judges its own settings
refused(["rollout.engine=sglang_server"], "rollout.engine=sglang_server needs rollout.server.urls")
refused(
    ["rollout.engine=vllm_server", "rollout.server.urls=[http://x:8000]", "rollout.server.colocate=true"],
    "rollout.server.colocate=True is not available with rollout.engine=vllm_server",
)
refused(
    ["rollout.max_staleness=1", "loss.decoupled=true"],
    "rollout.engine=hf does not (the in-process engine generates with the very weights being trained)",
)
refused(["rollout.engine=nope"], "rollout.engine='nope' is no registered rollout engine")

heavy = sorted(
    m for m in sys.modules
    if m.split(".")[0] in ("torch", "transformers", "torchvision", "torchcodec")
    or m == "paravt.train.rl" or m.startswith("paravt.train.rl.")
)
assert not heavy, heavy
print("light recipes: ok")
"""


def test_every_shipped_recipe_loads_and_doctor_checks_it_with_torch_and_the_trainer_blocked() -> (
    None
):
    code = BLOCKER + textwrap.dedent(CHECKS)
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "light recipes: ok" in result.stdout
