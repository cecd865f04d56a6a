"""Rollout engines by the recipe's `rollout.engine` name: `register_engine`, `build_engine`."""

from __future__ import annotations

from collections.abc import Callable

from paravt.train.rl.engines.base import EngineContext, RolloutEngine

EngineBuilder = Callable[[EngineContext], RolloutEngine]

_ENGINES: dict[str, EngineBuilder] = {}


def register_engine(name: str, engine: type[RolloutEngine] | EngineBuilder) -> None:
    """Make `rollout.engine: <name>` build `engine` (a `RolloutEngine` subclass, through its
    `build`, or a function of an `EngineContext`). Registering the same one again is a no-op;
    another one under a taken name is a `ValueError`."""
    builder: EngineBuilder = engine
    if isinstance(engine, type) and issubclass(engine, RolloutEngine):
        builder = engine.build
    known = _ENGINES.get(name)
    if known is not None and known != builder:
        raise ValueError(f"a rollout engine is registered as {name!r} already: {known!r}")
    _ENGINES[name] = builder


def engine_names() -> tuple[str, ...]:
    """The registered `rollout.engine` names."""
    return tuple(sorted(_ENGINES))


def build_engine(ctx: EngineContext) -> RolloutEngine:
    """The engine `ctx.recipe.rollout.engine` names, built from `ctx`."""
    name = ctx.recipe.rollout.engine
    builder = _ENGINES.get(name)
    if builder is None:
        raise ValueError(
            f"rollout.engine={name!r} is no registered rollout engine (registered: "
            f"{', '.join(engine_names())}); see paravt.train.rl.engines.register_engine"
        )
    return builder(ctx)
