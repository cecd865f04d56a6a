"""The three ways a model trains: one process, FSDP2, DeepSpeed ZeRO (the process group and the
collectives: `paravt.train.process_group`).

`Backend` hides the differences the recipes care about: backward with gradient accumulation, one
optimiser step (clip, step, schedule, zero), the full weights gathered tensor by tensor in buckets
(`iter_full_state`, for checkpoints and for rollout engines, which are `paravt.train.rl.engines`'
business: a Backend only hands out the buckets), and optimiser state save/load.

- `none`: plain module, one process (a torchrun launch with it is refused: use fsdp2).
- `fsdp2`: `torch.distributed.fsdp.fully_shard` on every decoder/vision block and the root, fp32
  master weights with a bf16/fp32-reduce `MixedPrecisionPolicy` when computing in bf16;
  gradients are averaged over ranks by FSDP.
- `deepspeed`: `deepspeed.initialize` with ZeRO-2 (or 3) and a client AdamW; the accumulation
  boundary is set explicitly, so a step may have any number of micro-batches.

Rank symmetry: each process binds its GPU before the group starts
(`process_group.init_distributed`), every collective's tensors live on the group's device
(`process_group.collective_device`), and trainers run the same number of forward/backward passes
on every rank (`paravt.train.modeling.balance_micro_batches`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from paravt.core.engines import iter_buckets
from paravt.train.optim import make_optimizer, make_scheduler
from paravt.train.ranks import is_rank0
from paravt.train.recipe import DistributedSpec, OptimSpec

log = logging.getLogger("paravt.train")


def _blocks(model: Any) -> list[torch.nn.Module]:
    """The repeated blocks worth sharding one by one (decoder layers, vision blocks)."""
    out = []
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.ModuleList) and name.split(".")[-1] in ("layers", "blocks"):
            out.extend(module)
    return out


def fsdp_mixed_precision(compute_dtype: torch.dtype) -> Any:
    """FSDP2's policy for a compute dtype: bf16 parameters in forward/backward with gradients
    reduce-scattered in fp32 (None for fp32 training: nothing to cast)."""
    if compute_dtype == torch.float32:
        return None
    from torch.distributed.fsdp import MixedPrecisionPolicy

    return MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32)


def fsdp_shard(model: Any, compute_dtype: torch.dtype) -> Any:
    """FSDP2 in place: `fully_shard` on every decoder / vision block, then on the root, with the
    compute dtype's mixed-precision policy. Returns `model`."""
    from torch.distributed.fsdp import fully_shard

    mp = fsdp_mixed_precision(compute_dtype)
    kwargs = {"mp_policy": mp} if mp is not None else {}
    for block in _blocks(model):
        fully_shard(block, **kwargs)
    fully_shard(model, **kwargs)
    return model


def shard_like_policy(model: Any, spec: DistributedSpec, compute_dtype: torch.dtype) -> Any:
    """A frozen model (the KL reference) sharded the way the policy is, so it is not a full copy
    on every GPU: fully_shard per block under FSDP2, a ZeRO-3 inference engine under DeepSpeed
    stage 3; unchanged otherwise (ZeRO-2 keeps full parameters on every rank, as the policy).
    Forward passes on it are collectives under FSDP2/ZeRO-3: every rank must make them."""
    model.requires_grad_(False)
    if spec.strategy == "fsdp2":
        return fsdp_shard(model, compute_dtype)
    if spec.strategy == "deepspeed" and spec.zero_stage == 3:
        import deepspeed

        bf16 = compute_dtype == torch.bfloat16
        config = {
            "train_micro_batch_size_per_gpu": 1,
            "zero_optimization": {"stage": 3},
            "bf16": {"enabled": bf16},
            "steps_per_print": 10**9,
        }
        engine, *_ = deepspeed.initialize(model=model, config=config)
        return engine.module
    return model


class Backend:
    """See module docstring. `model` is what forward passes use.

    `compute_dtype` (bf16 on GPU) is the dtype of forward/backward; under FSDP2 the model holds
    fp32 master weights and `MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)` casts them;
    under DeepSpeed the bf16 section keeps fp32 master weights and gradients are communicated in
    fp32.
    """

    def __init__(
        self,
        model: Any,
        spec: DistributedSpec,
        optim: OptimSpec,
        total_steps: int,
        *,
        trainable: bool = True,
        compute_dtype: torch.dtype | None = None,
    ) -> None:
        self.spec = spec
        self.optim_spec = optim
        self.ds_engine: Any = None
        if compute_dtype is None:
            compute_dtype = next(model.parameters()).dtype
        self.compute_dtype = compute_dtype
        self.sharded = spec.strategy == "fsdp2" or (
            spec.strategy == "deepspeed" and spec.zero_stage == 3
        )
        if spec.strategy == "fsdp2":
            fsdp_shard(model, compute_dtype)
        if spec.strategy == "deepspeed":
            import deepspeed

            optimizer = make_optimizer(model.parameters(), optim)
            scheduler = make_scheduler(optimizer, optim, total_steps)
            bf16 = compute_dtype == torch.bfloat16
            config: dict[str, Any] = {
                "train_micro_batch_size_per_gpu": 1,
                "gradient_accumulation_steps": 1,
                "gradient_clipping": optim.max_grad_norm or 0.0,
                "zero_optimization": {"stage": spec.zero_stage},
                "bf16": {"enabled": bf16},
                "zero_allow_untested_optimizer": True,
                "steps_per_print": 10**9,
                "wall_clock_breakdown": False,
            }
            if bf16:
                config["communication_data_type"] = "fp32"
            # the schedule is ours to advance (`step`), not the engine's: an RL step may take
            # several optimiser steps and the schedule counts RL steps
            self.ds_engine, self.optimizer, _, _ = deepspeed.initialize(
                model=model, optimizer=optimizer, config=config
            )
            self.model = self.ds_engine.module
            self.scheduler = scheduler
        else:
            self.model = model
            self.optimizer = make_optimizer(model.parameters(), optim)
            self.scheduler = make_scheduler(self.optimizer, optim, total_steps)

    @property
    def world_size(self) -> int:
        return dist.get_world_size() if dist.is_initialized() else 1

    @property
    def grad_average_ranks(self) -> int:
        """Ranks whose gradients FSDP2 / DeepSpeed average (1 without sharding): a rank's loss is
        multiplied by this so the average over ranks is the global sum / global normaliser."""
        return self.world_size if self.spec.strategy in ("fsdp2", "deepspeed") else 1

    # ------------------------------------------------------------------------------ training step

    def forward_module(self) -> Any:
        return self.ds_engine if self.ds_engine is not None else self.model

    def backward(self, loss: torch.Tensor, *, last: bool) -> None:
        """Accumulate gradients of `loss` (already scaled by the caller); `last` ends the step."""
        if self.ds_engine is not None:
            self.ds_engine.set_gradient_accumulation_boundary(last)
            self.ds_engine.backward(loss)
        else:
            loss.backward()

    def step(self, *, advance_schedule: bool = True) -> float:
        """Clip, optimiser step, zero grads, and (unless `advance_schedule` is false: an RL step
        of several optimiser steps advances it once, `advance_schedule()`) the scheduler step;
        returns the pre-clip grad norm."""
        if self.ds_engine is not None:
            self.ds_engine.set_gradient_accumulation_boundary(True)
            self.ds_engine.step()
            norm = self.ds_engine.get_global_grad_norm()
            value = float(norm) if norm is not None else float("nan")
        else:
            params = [p for p in self.model.parameters() if p.grad is not None]
            max_norm = self.optim_spec.max_grad_norm or float("inf")
            total = torch.nn.utils.clip_grad_norm_(params, max_norm)
            if hasattr(total, "full_tensor"):
                total = total.full_tensor()
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            value = float(total)
        if advance_schedule:
            self.advance_schedule()
        return value

    def advance_schedule(self) -> None:
        """One step of the learning-rate schedule."""
        self.scheduler.step()

    @property
    def lr(self) -> float:
        return float(self.scheduler.get_last_lr()[0])

    # ------------------------------------------------------------------------------ state

    def iter_full_state(
        self, *, bucket_bytes: int = 256 << 20, device: torch.device | str | None = None
    ) -> Iterator[list[tuple[str, torch.Tensor]]]:
        """The unsharded weights in buckets of about `bucket_bytes`, gathered one tensor at a time
        and moved to `device` (default: where they were gathered), so no more than one bucket is
        ever whole on a GPU. Collective under FSDP2 / ZeRO-3: every rank iterates to the end, in
        the same order. Names are the HF checkpoint's."""
        named = (
            (name, tensor if device is None else tensor.to(device))
            for name, tensor in self._iter_full_tensors()
        )
        yield from iter_buckets(named, bucket_bytes)

    def _iter_full_tensors(self) -> Iterator[tuple[str, torch.Tensor]]:
        if self.spec.strategy == "fsdp2":
            for name, value in self.model.state_dict().items():
                if hasattr(value, "full_tensor"):
                    value = value.full_tensor()  # all-gather of this one tensor
                yield name, value.detach()
            return
        if self.ds_engine is not None and self.spec.zero_stage == 3:
            import deepspeed

            params = dict(self.model.named_parameters())
            for name, value in self.model.state_dict().items():
                param = params.get(name)
                if param is None:
                    yield name, value.detach()
                    continue
                with deepspeed.zero.GatheredParameters([param], modifier_rank=None):
                    yield name, param.detach().clone()
            return
        for name, value in self.model.state_dict().items():
            yield name, value.detach()

    def full_model_state(self, *, all_ranks: bool = False) -> dict[str, torch.Tensor]:
        """Unsharded weights on CPU, gathered tensor by tensor (a collective under FSDP2/ZeRO-3).
        Rank 0 keeps them (every rank with `all_ranks`); other ranks get an empty dict."""
        keep = all_ranks or is_rank0()
        state: dict[str, torch.Tensor] = {}
        for bucket in self.iter_full_state(device="cpu"):
            if keep:
                state.update(bucket)
        return state

    def optimizer_state(self) -> dict[str, Any]:
        """Optimiser state in a form `load_optimizer_state` takes back (full, not sharded)."""
        if self.ds_engine is not None:
            return {}  # DeepSpeed writes its own (sharded) optimizer files: save_deepspeed
        # The same full, parameter-name-keyed format for one process and FSDP2, so a checkpoint
        # of either loads into the other.
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_optimizer_state_dict,
        )

        opts = StateDictOptions(full_state_dict=True, cpu_offload=self.spec.strategy == "fsdp2")
        return get_optimizer_state_dict(self.model, self.optimizer, options=opts)

    def load_optimizer_state(self, state: dict[str, Any]) -> None:
        if self.ds_engine is None:
            from torch.distributed.checkpoint.state_dict import (
                StateDictOptions,
                set_optimizer_state_dict,
            )

            opts = StateDictOptions(full_state_dict=True, broadcast_from_rank0=False)
            set_optimizer_state_dict(self.model, self.optimizer, state, options=opts)

    def load_model_state(self, state: dict[str, torch.Tensor]) -> None:
        if self.spec.strategy == "fsdp2":
            from torch.distributed.checkpoint.state_dict import (
                StateDictOptions,
                set_model_state_dict,
            )

            opts = StateDictOptions(full_state_dict=True, broadcast_from_rank0=False)
            set_model_state_dict(self.model, state, options=opts)
        else:
            self.model.load_state_dict(state, strict=False)

    def save_deepspeed(self, directory: Path) -> None:
        if self.ds_engine is not None:
            self.ds_engine.save_checkpoint(str(directory), tag="ds", save_latest=False)

    def load_deepspeed(self, directory: Path) -> None:
        if self.ds_engine is not None:
            self.ds_engine.load_checkpoint(
                str(directory), tag="ds", load_module_strict=False, load_lr_scheduler_states=False
            )
