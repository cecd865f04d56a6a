"""Rollout engines by name: what `rollout.engine: <name>` in a recipe means (`register_engine`,
`engine_class`, `engine_names`).

Dependency-free on purpose: the recipe asks it while it validates (`RolloutSpec`: each engine
class judges its own `rollout` settings with `check_spec` and says whether it can run
asynchronously, `supports_staleness`), and the engines themselves (`paravt.train.rl.engines`)
import the recipe, so the registry sits below both.

The built-in engines are named here by module and attribute and imported the first time a
recipe (or anything else) asks for one, as `paravt.train`'s own lazy names are: importing the
recipe stays light (no torch), and a recipe naming `hf` still gets `hf`'s checks. Any other engine
is registered by the code that defines it (`register_engine(name, cls)`, before the recipe that
names it is loaded).
"""

from __future__ import annotations

import importlib
from typing import Any

# name -> (module, attribute) of the built-in engines, imported when first asked for
BUILT_IN: dict[str, tuple[str, str]] = {
    "hf": ("paravt.train.rl.engines.hf", "HFRollouts"),
    "sglang_server": ("paravt.train.rl.engines.servers", "SGLangServers"),
    "vllm_server": ("paravt.train.rl.engines.servers", "VLLMServers"),
}

_ENGINES: dict[str, Any] = {}  # name -> a RolloutEngine subclass, or a function of a context


def register_engine(name: str, engine: Any) -> None:
    """Make `rollout.engine: <name>` build `engine`: a `RolloutEngine` subclass (its `build`,
    `check_spec` and `supports_staleness` are used), or a function of an `EngineContext` (no
    checks of its own, synchronous only). Registering the same one again is a no-op; another one
    under a taken name (a built-in's included) is a `ValueError`."""
    known = engine_class(name)
    if known is not None and known is not engine:
        raise ValueError(f"a rollout engine is registered as {name!r} already: {known!r}")
    _ENGINES[name] = engine


def engine_class(name: str) -> Any:
    """What `rollout.engine: <name>` builds (a class or a function), or None for a name nobody
    registered. A built-in is imported on first use."""
    found = _ENGINES.get(name)
    if found is None and name in BUILT_IN:
        module, attribute = BUILT_IN[name]
        # not an import statement: the engines import the recipe, which asks this registry
        found = _ENGINES[name] = getattr(importlib.import_module(module), attribute)
    return found


def engine_names(*, supports_staleness: bool | None = None) -> tuple[str, ...]:
    """The registered `rollout.engine` names, sorted; with `supports_staleness`, only those whose
    engine can (True) or cannot (False) generate while the trainer trains (`max_staleness > 0`)."""
    names = sorted({*BUILT_IN, *_ENGINES})
    if supports_staleness is None:
        return tuple(names)
    return tuple(n for n in names if staleness_supported(n) == supports_staleness)


def staleness_supported(name: str) -> bool:
    """Whether the engine registered as `name` may generate while the trainer trains and knows
    which weights produced each reply (`RolloutEngine.supports_staleness`)."""
    return bool(getattr(engine_class(name), "supports_staleness", False))


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
    """What the engine registered as `name` finds wrong with a recipe's `rollout` section
    (`RolloutEngine.check_spec`; each problem names the key and the fix). An unregistered name is
    the one problem; an engine registered as a function has no checks but refuses staleness."""
    engine = engine_class(name)
    if engine is None:
        return [
            f"rollout.engine={name!r} is no registered rollout engine (registered: "
            f"{', '.join(engine_names())}); an engine defined elsewhere is registered with "
            "paravt.train.rl.register_engine(name, cls) before the recipe naming it is loaded"
        ]
    own = getattr(engine, "check_spec", None)
    if own is not None:
        return list(own(rollout))
    if rollout.max_staleness:
        return [staleness_refusal(name, rollout.max_staleness, "it is registered as a function")]
    return []
