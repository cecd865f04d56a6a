"""Rollout engines by the recipe's `rollout.engine` name: `register_engine`, `build_engine`.

The names live in `paravt.train.engine_registry` (light, so the recipe can ask it while it
validates: each engine's checks judge its settings, `EngineChecks.check_spec`, without importing
the engine); this module types them and builds the one a run names."""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from paravt.train.engine_registry import engine_class as _engine_class
from paravt.train.engine_registry import engine_names as _engine_names
from paravt.train.engine_registry import register_engine as _register_engine
from paravt.train.rl.engines.base import EngineContext, RolloutEngine

EngineBuilder = Callable[[EngineContext], RolloutEngine]


def register_engine(name: str, engine: type[RolloutEngine] | EngineBuilder) -> None:
    """Make `rollout.engine: <name>` build `engine`: a `RolloutEngine` subclass (through its
    `build`; its `check_spec` and `supports_staleness` judge the recipe) or a function of an
    `EngineContext` (no checks of its own, synchronous only). Registering the same one again is
    a no-op; another one under a taken name is a `ValueError`. Register before loading a recipe
    that names it: the recipe asks the registry while it validates."""
    _register_engine(name, engine)


def engine_names() -> tuple[str, ...]:
    """The registered `rollout.engine` names (the built-in ones included)."""
    return _engine_names()


def engine_class(name: str) -> type[RolloutEngine] | EngineBuilder | None:
    """What `rollout.engine: <name>` builds, or None when nothing is registered as `name`."""
    found: type[RolloutEngine] | EngineBuilder | None = _engine_class(name)
    return found


def build_engine(ctx: EngineContext) -> RolloutEngine:
    """The engine `ctx.recipe.rollout.engine` names, built from `ctx`."""
    name = ctx.recipe.rollout.engine
    engine = engine_class(name)
    if engine is None:
        raise ValueError(
            f"rollout.engine={name!r} is no registered rollout engine (registered: "
            f"{', '.join(engine_names())}); see paravt.train.rl.engines.register_engine"
        )
    if isinstance(engine, type) and issubclass(engine, RolloutEngine):
        return engine.build(ctx)
    return cast(EngineBuilder, engine)(ctx)  # registered as a function of the context
