"""Process groups and the three ways a model trains: one process, FSDP2, DeepSpeed ZeRO.

`Backend` hides the differences the recipes care about: backward with gradient accumulation, one
optimiser step (clip, step, schedule, zero), the full state dict on every rank (for checkpoints and
for the rollout engine), and optimiser state save/load.

- `none`: plain module (several torchrun ranks without sharding are not supported: use fsdp2).
- `fsdp2`: `torch.distributed.fsdp.fully_shard` on every decoder/vision block and the root;
  gradients are averaged over ranks by FSDP. Rollouts cannot run on the sharded module (ranks would
  generate different numbers of tokens and their all-gathers would deadlock), so the trainer keeps
  an unsharded replica for the engine and refreshes it from the full state dict after every step.
- `deepspeed`: `deepspeed.initialize` with ZeRO-2 (or 3) and a client AdamW; the accumulation
  boundary is set explicitly, so a step may have any number of micro-batches.
"""

from __future__ import annotations

import datetime
import logging
import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from paravt.train.recipe import DistributedSpec, OptimSpec

log = logging.getLogger("paravt.train")


def init_distributed(spec: DistributedSpec, device: torch.device) -> tuple[int, int]:
    """Start the process group when running under torchrun (or for DeepSpeed); (rank, world)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    needs_group = world > 1 or spec.strategy in ("fsdp2", "deepspeed")
    if needs_group and not dist.is_initialized():
        backend = spec.backend
        if backend == "auto":
            backend = "nccl" if device.type == "cuda" else "gloo"
        if world == 1:  # single process: a group of one, so FSDP2 / DeepSpeed work unchanged
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
            os.environ.setdefault("RANK", "0")
            os.environ.setdefault("LOCAL_RANK", "0")
            os.environ.setdefault("WORLD_SIZE", "1")
        if spec.strategy == "deepspeed":
            import deepspeed

            deepspeed.init_distributed(dist_backend=backend)
        else:
            dist.init_process_group(backend, timeout=datetime.timedelta(minutes=30))
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    if world > 1:
        raise RuntimeError("WORLD_SIZE > 1 but no process group; launch with torchrun")
    return 0, 1


def all_reduce_mean(values: dict[str, float]) -> dict[str, float]:
    """Average scalar metrics over ranks (identity in one process)."""
    if not (dist.is_initialized() and dist.get_world_size() > 1) or not values:
        return values
    keys = sorted(values)
    t = torch.tensor([float(values[k]) for k in keys], dtype=torch.float64)
    dist.all_reduce(t)
    t /= dist.get_world_size()
    return dict(zip(keys, t.tolist()))


def barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def _blocks(model: Any) -> list[torch.nn.Module]:
    """The repeated blocks worth sharding one by one (decoder layers, vision blocks)."""
    out = []
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.ModuleList) and name.split(".")[-1] in ("layers", "blocks"):
            out.extend(module)
    return out


class Backend:
    """See module docstring. `model` is what forward passes use."""

    def __init__(
        self,
        model: Any,
        spec: DistributedSpec,
        optim: OptimSpec,
        total_steps: int,
        *,
        trainable: bool = True,
    ) -> None:
        from paravt.train.modeling import make_optimizer, make_scheduler

        self.spec = spec
        self.optim_spec = optim
        self.ds_engine: Any = None
        self.sharded = spec.strategy == "fsdp2" or (
            spec.strategy == "deepspeed" and spec.zero_stage == 3
        )
        if spec.strategy == "fsdp2":
            from torch.distributed.fsdp import fully_shard

            for block in _blocks(model):
                fully_shard(block)
            fully_shard(model)
        if spec.strategy == "deepspeed":
            import deepspeed

            optimizer = make_optimizer(model.parameters(), optim)
            scheduler = make_scheduler(optimizer, optim, total_steps)
            config = {
                "train_micro_batch_size_per_gpu": 1,
                "gradient_accumulation_steps": 1,
                "gradient_clipping": optim.max_grad_norm or 0.0,
                "zero_optimization": {"stage": spec.zero_stage},
                "bf16": {"enabled": next(model.parameters()).dtype == torch.bfloat16},
                "zero_allow_untested_optimizer": True,
                "steps_per_print": 10**9,
                "wall_clock_breakdown": False,
            }
            self.ds_engine, self.optimizer, _, self.scheduler = deepspeed.initialize(
                model=model, optimizer=optimizer, lr_scheduler=scheduler, config=config
            )
            self.model = self.ds_engine.module
            self.scheduler = scheduler
        else:
            self.model = model
            self.optimizer = make_optimizer(model.parameters(), optim)
            self.scheduler = make_scheduler(self.optimizer, optim, total_steps)

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

    def step(self) -> float:
        """Clip, optimiser step, scheduler step, zero grads; returns the pre-clip grad norm."""
        if self.ds_engine is not None:
            self.ds_engine.set_gradient_accumulation_boundary(True)
            self.ds_engine.step()
            norm = self.ds_engine.get_global_grad_norm()
            return float(norm) if norm is not None else float("nan")
        params = [p for p in self.model.parameters() if p.grad is not None]
        max_norm = self.optim_spec.max_grad_norm or float("inf")
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        if hasattr(norm, "full_tensor"):
            norm = norm.full_tensor()
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(norm)

    @property
    def lr(self) -> float:
        return float(self.scheduler.get_last_lr()[0])

    # ------------------------------------------------------------------------------ state

    def full_model_state(self) -> dict[str, torch.Tensor]:
        """Unsharded weights on CPU, identical on every rank (a collective under FSDP2/ZeRO-3)."""
        if self.spec.strategy == "fsdp2":
            from torch.distributed.checkpoint.state_dict import (
                StateDictOptions,
                get_model_state_dict,
            )

            opts = StateDictOptions(full_state_dict=True, cpu_offload=False)
            state = get_model_state_dict(self.model, options=opts)
            return {k: v.detach().cpu() for k, v in state.items()}
        if self.ds_engine is not None and self.spec.zero_stage == 3:
            import deepspeed

            params = list(self.model.parameters())
            with deepspeed.zero.GatheredParameters(params, modifier_rank=None):
                return {k: v.detach().cpu().clone() for k, v in self.model.state_dict().items()}
        return {k: v.detach().cpu() for k, v in self.model.state_dict().items()}

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
                str(directory), tag="ds", load_module_strict=False, load_lr_scheduler_states=True
            )
