"""`rollout.engine: hf`: transformers in the trainer's processes (`HFEngine`), on the policy
module itself or, when the backend shards it, on an unsharded replica."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from paravt.core.engines import HFEngine
from paravt.train.engine_checks import HFChecks
from paravt.train.numerics import apply_matmul_setting
from paravt.train.rl.engines.base import Bucket, EngineContext, RolloutEngine


class HFRollouts(HFChecks, RolloutEngine):
    """`rollout.engine: hf`: transformers in the trainer's processes, synchronous only (its
    recipe rules: `HFChecks`). `build` picks the policy module itself (`InProcessHF`) or, when
    the backend shards it, a replica (`HFReplica`)."""

    @classmethod
    def build(cls, ctx: EngineContext) -> RolloutEngine:
        kind: type[RolloutEngine] = HFReplica if ctx.backend.sharded else InProcessHF
        return kind.build(ctx)


class InProcessHF(HFRollouts):
    """`HFEngine` holding the policy module itself (one process, or DeepSpeed ZeRO-2): the weights
    are shared, so every optimiser step is seen by the next rollout and nothing is sent."""

    receives_weights = False

    def __init__(self, engine: HFEngine) -> None:
        self.engine = engine

    @classmethod
    def build(cls, ctx: EngineContext) -> InProcessHF:
        return cls(HFEngine(ctx.backend.model, ctx.processor))

    def load_weights(self, buckets: Iterable[Bucket], version: str) -> None:
        """Nothing to load: the engine generates with the policy module."""


class HFReplica(HFRollouts):
    """`HFEngine` on an unsharded inference replica (FSDP2, ZeRO-3: generation cannot run on the
    sharded module, ranks would generate different numbers of tokens and their all-gathers
    would deadlock), loaded from the starting weights and refreshed bucket by bucket."""

    def __init__(self, replica: Any, processor: Any) -> None:
        self.replica = replica
        self.engine = HFEngine(replica, processor)

    @classmethod
    def build(cls, ctx: EngineContext) -> HFReplica:
        from transformers import AutoModelForImageTextToText

        replica = AutoModelForImageTextToText.from_pretrained(
            str(ctx.model_path), dtype=ctx.backend.compute_dtype
        ).to(ctx.device)
        replica.requires_grad_(False).eval()
        apply_matmul_setting(replica, ctx.recipe.model.bf16_matmul)
        return cls(replica, ctx.processor)

    def load_weights(self, buckets: Iterable[Bucket], version: str) -> None:
        targets = self.replica.state_dict()
        with torch.no_grad():
            for bucket in buckets:
                for name, tensor in bucket:
                    if name in targets:
                        targets[name].copy_(tensor)
