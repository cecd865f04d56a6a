"""Rollout engines by name: what `rollout.engine: <name>` in a recipe means (`register_engine`,
`engine_checks`, `engine_class`, `engine_names`, `check_spec`).

Light on purpose: the recipe asks it while it validates, and a recipe loads without torch or the
RL trainer (`paravt-train doctor`, `load_recipe` on a machine with no GPU stack). So each name
has two sides: its checks (`engine_checks`: the light class that judges the recipe's `rollout`
section, `paravt.train.engine_checks`) and its engine (`engine_class`: what a run builds, in
`paravt.train.rl.engines`, which imports the recipe). A built-in engine's checks are imported
here, its engine class only when a run builds it (named by module and attribute, imported on
first use: not an import statement, as the engines sit above the recipe that asks this
registry). Any other engine is registered by the code that defines it
(`register_engine(name, cls)`, before the recipe that names it is loaded); a `RolloutEngine`
subclass inherits `EngineChecks`, so the class it registers is its own checks.

An installed package adds an engine without code that runs before the recipe: an entry point in
the group `paravt.rollout_engines` (`toy = "my_pkg.engine:ToyEngine"` under
`[project.entry-points."paravt.rollout_engines"]`) is registered under its name the first time a
recipe or the command line names it. An engine's own settings live in the recipe's
`rollout.engine_settings` and are validated against its `settings` model
(`EngineChecks.settings`), so a new engine with settings needs no edit of the recipe schema.

The one registry: `paravt.train.rl` and `paravt.train.rl.engines` re-export these functions.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Any

from pydantic import ValidationError

from paravt.train.engine_checks import EngineChecks, HFChecks, SGLangChecks, VLLMChecks

# name -> (its light checks, (module, attribute) of its engine class, imported when first built)
BUILT_IN: dict[str, tuple[type[EngineChecks], tuple[str, str]]] = {
    "hf": (HFChecks, ("paravt.train.rl.engines.hf", "HFRollouts")),
    "sglang_server": (SGLangChecks, ("paravt.train.rl.engines.servers", "SGLangServers")),
    "vllm_server": (VLLMChecks, ("paravt.train.rl.engines.servers", "VLLMServers")),
}
FUNCTION_REASON = "it is registered as a function"  # why an engine function is synchronous
ENTRY_POINT_GROUP = "paravt.rollout_engines"  # installed packages' engines, by name

_ENGINES: dict[str, Any] = {}  # name -> a RolloutEngine subclass, or a function of a context


def register_engine(name: str, engine: Any) -> None:
    """Make `rollout.engine: <name>` build `engine`: a `RolloutEngine` subclass (its `build`,
    `check_spec` and `supports_staleness` are used), or a function of an `EngineContext` (no
    checks of its own, synchronous only). Registering the same one again is a no-op; another one
    under a taken name (a built-in's included) is a `ValueError`."""
    known = _ENGINES.get(name)
    if known is None and name in BUILT_IN:
        module, attribute = BUILT_IN[name][1]
        # the built-in itself (compared by name: importing it here would load the trainer)
        same = (getattr(engine, "__module__", None), getattr(engine, "__qualname__", None))
        if same == (module, attribute):
            return
        known = f"{module}.{attribute}"
    if known is not None and known is not engine:
        raise ValueError(f"a rollout engine is registered as {name!r} already: {known!r}")
    _ENGINES[name] = engine


def _installed(name: str) -> Any:
    """The engine an installed package declares as `name` in `ENTRY_POINT_GROUP`, registered on
    first use; None when none does. Loading it imports that package (its own weight)."""
    found = _ENGINES.get(name)
    if found is not None or name in BUILT_IN:
        return found
    for point in entry_points(group=ENTRY_POINT_GROUP, name=name):
        try:
            engine = point.load()
        except Exception as exc:  # a broken plugin names itself, not a missing engine
            raise ValueError(
                f"rollout.engine={name!r}: the entry point {point.value!r} (group "
                f"{ENTRY_POINT_GROUP}) failed to load: {type(exc).__name__}: {exc}"
            ) from exc
        register_engine(name, engine)
        return engine
    return None


def engine_checks(name: str) -> Any:
    """What judges a recipe naming `rollout.engine: <name>` (light: nothing is built or loaded
    beyond it): a built-in's `EngineChecks` class, or what was registered under the name (a
    `RolloutEngine` subclass is its own checks; a function has none); None for a name nobody
    registered."""
    if name in BUILT_IN:
        return BUILT_IN[name][0]  # the engine class, once imported, inherits these
    return _installed(name)


def engine_class(name: str) -> Any:
    """What `rollout.engine: <name>` builds (a class or a function), or None for a name nobody
    registered. A built-in is imported on first use (it loads the RL trainer and torch)."""
    if name in BUILT_IN:
        shadowing = [p.value for p in entry_points(group=ENTRY_POINT_GROUP, name=name)]
        if shadowing:  # never silently the built-in where a package meant its own
            raise ValueError(
                f"rollout.engine={name!r} is a built-in engine, and an installed package also "
                f"declares {', '.join(shadowing)} under that name (group {ENTRY_POINT_GROUP}): "
                "rename the entry point"
            )
    found = _installed(name)
    if found is None and name in BUILT_IN:
        module, attribute = BUILT_IN[name][1]
        # not an import statement: the engines import the recipe, which asks this registry
        found = _ENGINES[name] = getattr(importlib.import_module(module), attribute)
    return found


def engine_names(*, supports_staleness: bool | None = None) -> tuple[str, ...]:
    """The registered `rollout.engine` names, sorted; with `supports_staleness`, only those whose
    engine can (True) or cannot (False) generate while the trainer trains (`max_staleness > 0`)."""
    names = sorted({*BUILT_IN, *_ENGINES, *entry_points(group=ENTRY_POINT_GROUP).names})
    if supports_staleness is None:
        return tuple(names)
    return tuple(n for n in names if staleness_supported(n) == supports_staleness)


def staleness_supported(name: str) -> bool:
    """Whether the engine registered as `name` may generate while the trainer trains and knows
    which weights produced each reply (`EngineChecks.supports_staleness`)."""
    return bool(getattr(engine_checks(name), "supports_staleness", False))


def staleness_refusal(name: str, max_staleness: int, reason: str) -> str:
    """The problem with `rollout.max_staleness` > 0 on an engine that cannot run asynchronously
    (`reason`: why not), naming the engines that can."""
    asynchronous = engine_names(supports_staleness=True)
    return (
        f"rollout.max_staleness={max_staleness} needs a rollout engine that generates while the "
        "trainer trains and knows which weights produced each reply ("
        + " or ".join(f"rollout.engine={n}" for n in asynchronous)
        + f"); rollout.engine={name} does not ({reason}): set rollout.max_staleness=0, or name "
        "one of those"
    )


def check_spec(name: str, rollout: Any) -> list[str]:
    """What is wrong with a recipe's `rollout` section (a `RolloutSpec`) for the engine
    registered as `name`, each problem naming the key and the fix: `max_staleness` > 0 on an
    engine that cannot run asynchronously (`supports_staleness`; an engine registered as a
    function cannot), `rollout.engine_settings` against the engine's `settings` model, then the
    engine's own rules (`EngineChecks.check_spec`). An unregistered
    name is the one problem. Light: the engine's checks, never the engine (`engine_checks`)."""
    checks = engine_checks(name)
    if checks is None:
        return [
            f"rollout.engine={name!r} is no registered rollout engine (registered: "
            f"{', '.join(engine_names())}); an engine defined elsewhere is registered with "
            "paravt.train.rl.register_engine(name, cls) before the recipe naming it is loaded"
        ]
    problems = _settings_problems(name, checks, rollout.engine_settings)
    if rollout.max_staleness and not getattr(checks, "supports_staleness", False):
        reason = getattr(checks, "synchronous_reason", FUNCTION_REASON)
        problems.append(staleness_refusal(name, rollout.max_staleness, reason))
    own = getattr(checks, "check_spec", None)
    if own is not None:
        problems += own(rollout)
    return problems


def _settings_problems(name: str, checks: Any, given: dict[str, Any]) -> list[str]:
    """`rollout.engine_settings` judged by the engine's `settings` model (a pydantic model; an
    engine without one takes none), one problem per error, naming the key."""
    model = getattr(checks, "settings", None)
    if model is None:
        if not given:
            return []
        return [
            f"rollout.engine_settings={given!r}: rollout.engine={name} takes no settings of its "
            "own; leave rollout.engine_settings out"
        ]
    try:
        model.model_validate(given)
    except ValidationError as exc:
        return [
            f"rollout.engine_settings.{'.'.join(str(p) for p in e['loc'])}: {e['msg']} "
            f"(rollout.engine={name}; its settings: {', '.join(model.model_fields)})"
            for e in exc.errors()
        ]
    return []
