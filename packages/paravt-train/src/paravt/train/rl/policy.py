"""The weight publisher: the rollout engine a run names (`paravt.train.rl.engines`) and how it
follows the policy's weights (versions, pushes, the check of a push and its one repeat). Not an
engine itself: "engine" is what generates (`paravt.core.Engine`) or the rollout engine that owns
one (`RolloutEngine`)."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import torch

from paravt.train.distributed import Backend
from paravt.train.recipe import RLRecipe
from paravt.train.rl.engines import WEIGHT_BUCKET_BYTES, EngineContext, build_engine

log = logging.getLogger("paravt.train")


class WeightSyncError(RuntimeError):
    """The rollout engine does not hold the weights the trainer pushed, even after a second push
    (the message names the server, the expected and the served weight version)."""


class WeightPublisher:
    """The rollout engine of a run (`rollout.engine`, built through the registry of
    `paravt.train.rl.engines`) and how it follows the policy's weights.

    As it starts and after every optimiser step (`sync`) the engine gets the policy's weights as
    version `step-<n>` (`RolloutEngine.load_weights`, unless it holds the policy module itself):
    `Backend.iter_full_state` buckets, gathered one tensor at a time, at most `WEIGHT_BUCKET_BYTES`
    at once, never the whole model on one GPU. When the engine checks them
    (`RolloutEngine.verify`) and finds a problem, they are pushed once more; a second problem
    stops the run (`WeightSyncError`) rather than train on rollouts of other weights.
    """

    WEIGHT_BUCKET_BYTES = WEIGHT_BUCKET_BYTES

    def __init__(
        self,
        recipe: RLRecipe,
        backend: Backend,
        processor: Any,
        model_path: Any,
        device: torch.device,
        *,
        step: int = 0,
    ) -> None:
        self.backend = backend
        self.step = step
        ctx = EngineContext(recipe, backend, processor, Path(model_path), device)
        self.rollout_engine = build_engine(ctx)
        self._follow()  # the engine starts from the policy (also after a resume)

    def sync(self) -> dict[str, float]:
        """After an optimiser step: the engine takes the policy's weights as the next version
        (collective: every rank calls it). Returns the sync metrics."""
        self.step += 1
        return self._follow()

    def before_update(self) -> None:
        """Before an optimiser step (e.g. colocated servers give their GPU memory to it)."""
        self.rollout_engine.before_update()

    def metrics(self) -> dict[str, float]:
        """The engine's metrics for this step's row."""
        return self.rollout_engine.metrics()

    def close(self) -> None:
        self.rollout_engine.close()

    def _follow(self) -> dict[str, float]:
        """Push the weights as version `step-<step>`; check them when the engine can, and push
        once more on a problem."""
        if not self.rollout_engine.receives_weights:
            return {}
        t0 = time.perf_counter()
        version = f"step-{self.step}"
        self._push(version)
        metrics = {"sync/push_s": time.perf_counter() - t0}
        check = self.rollout_engine.verify(version)
        if check is None:
            return metrics
        if check.problem:
            log.warning("weight sync: %s; pushing %s again", check.problem, version)
            self._push(version)
            check = self.rollout_engine.verify(version)
            if check is not None and check.problem:
                raise WeightSyncError(
                    f"weight sync failed twice: {check.problem}. The run stops rather than train "
                    f"on rollouts of other weights: {self.rollout_engine.sync_hint}"
                )
        if check is not None:
            metrics["sync/logprob_max_abs_diff"] = check.max_abs_diff
        return metrics

    def _push(self, version: str) -> None:
        buckets = self.backend.iter_full_state(
            bucket_bytes=self.WEIGHT_BUCKET_BYTES, device=self.rollout_engine.bucket_device
        )
        self.rollout_engine.load_weights(buckets, version)
