"""What every rollout engine does (`RolloutEngine`), what it is built from (`EngineContext`) and
what a check of its weights finds (`WeightCheck`), and `build_engine`: the one a recipe names,
from the registry (`paravt.train.engine_registry`, the one place engines are named)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, cast

import torch

from paravt.train.distributed import Backend
from paravt.train.engine_checks import EngineChecks
from paravt.train.engine_registry import engine_class, engine_names
from paravt.train.recipe import RLRecipe

Bucket = list[
    tuple[str, torch.Tensor]
]  # `(checkpoint name, tensor)` pairs, `Backend.iter_full_state`

WEIGHT_BUCKET_BYTES = 256 << 20  # weights travel in buckets of about this size, never whole


@dataclass(frozen=True)
class EngineContext:
    """What an engine is built from: the recipe (its `rollout` section names and configures the
    engine), the policy's `Backend`, the processor, the weights the engine starts from (the
    initial model, or the checkpoint a run resumes from) and this rank's device."""

    recipe: RLRecipe
    backend: Backend
    processor: Any
    model_path: Path
    device: torch.device


@dataclass(frozen=True)
class WeightCheck:
    """What `RolloutEngine.verify` found: the largest log-prob difference between the engine and
    the policy on a fixed sequence (nan when none was measured) and what is wrong ("": nothing)."""

    max_abs_diff: float
    problem: str = ""


class RolloutEngine(EngineChecks, ABC):
    """One kind of rollout engine: what the agent runtime generates with during RL, and how it
    follows the policy's weights. Every rank holds one; `paravt.train.rl.policy.WeightPublisher`
    drives it, in this order:

    1. `build(ctx)`, once (the class method a registration names);
    2. the agent runtime generates with `engine` (a `paravt.core` `Engine`: it also tokenizes
       the training sequences and gives the pad and image token ids);
    3. `before_update()` before each optimiser step (e.g. colocated servers free their memory);
    4. `load_weights(buckets, version)` once at the start (version `step-<start>`) and after every
       optimiser step (`step-<n>`), on every rank: `buckets` is `Backend.iter_full_state`, lazy
       and collective (whoever iterates must iterate it on every rank, to the end), gathered to
       `bucket_device`. Not called when `receives_weights` is False (the engine holds the policy
       module itself);
    5. `verify(version)` after each load (collective); a `WeightCheck` with a problem makes the
       driver load once more and then stop the run (`WeightSyncError`, with `sync_hint`); None:
       nothing was checked;
    6. `metrics()` into every step's metrics row (the same keys on every rank);
    7. `close()` when the run ends, also on an error.

    Before any of this, while the recipe validates, the class judges the recipe's `rollout`
    section (`check_spec`) and says whether it can run asynchronously (`supports_staleness`):
    what it inherits from `paravt.train.engine_checks.EngineChecks`, light (no torch), so a
    recipe loads without the trainer. A built-in engine inherits its own checks class there
    (`HFChecks`, `SGLangChecks`, `VLLMChecks`), which the registry asks until a run builds it.

    A new engine is a subclass in its own file plus one `register_engine(name, cls)` call, or an
    entry point in the group `paravt.rollout_engines` of the package that defines it
    (`paravt.train.engine_registry`); `rollout.engine: <name>` then builds it. Settings of its
    own: a pydantic model as `settings`, read with `engine_settings(ctx.recipe.rollout)`.
    """

    engine: Any  # the core Engine the agent runtime generates with
    receives_weights: ClassVar[bool] = True
    sync_hint: str = ""  # said when the weights did not arrive after a second load

    @classmethod
    @abstractmethod
    def build(cls, ctx: EngineContext) -> RolloutEngine:
        """The engine the recipe's `rollout` section describes, on every rank (fail fast here:
        an unreachable server, a wrong setting)."""

    @property
    def bucket_device(self) -> torch.device | str | None:
        """Where the buckets of `load_weights` are gathered to (None: where the backend holds
        the weights)."""
        return None

    def before_update(self) -> None:
        """Before each optimiser step (every rank)."""
        return None

    @abstractmethod
    def load_weights(self, buckets: Iterable[Bucket], version: str) -> None:
        """Take the policy's weights as `version` (collective: see the class docstring)."""

    def verify(self, version: str) -> WeightCheck | None:
        """Whether the engine generates with the policy's weights as `version` (collective)."""
        return None

    def metrics(self) -> dict[str, float]:
        """This rank's engine metrics for the step's row."""
        return {}

    def close(self) -> None:
        """The run is over: let go of what the engine holds."""
        return None


EngineBuilder = Callable[[EngineContext], RolloutEngine]  # an engine registered as a function


def build_engine(ctx: EngineContext) -> RolloutEngine:
    """The engine `ctx.recipe.rollout.engine` names, built from `ctx`."""
    name = ctx.recipe.rollout.engine
    engine = engine_class(name)
    if engine is None:
        raise ValueError(
            f"rollout.engine={name!r} is no registered rollout engine (registered: "
            f"{', '.join(engine_names())}); see paravt.train.rl.register_engine"
        )
    if isinstance(engine, type) and issubclass(engine, RolloutEngine):
        return engine.build(ctx)
    return cast(EngineBuilder, engine)(ctx)  # registered as a function of the context
