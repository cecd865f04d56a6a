"""The process group and the collectives the trainers use.

`init_distributed` binds each process to its GPU before the group starts and starts the group
(a group of one for a single-process FSDP2 / DeepSpeed run); every collective's tensors live on
the group's device (`collective_device`: CUDA for NCCL, CPU for gloo), and every rank makes the
same calls in the same order. Sharding and the optimiser step are `paravt.train.distributed`'s.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from paravt.train.recipe import DistributedSpec


def bind_device(device: torch.device) -> None:
    """Make `device` this process's current CUDA device (no-op on CPU).

    Must run before anything touches CUDA: FSDP2's DeviceMesh, NCCL communicators and
    `all_gather_object` all use the *current* device, which is `cuda:0` on every rank otherwise.
    """
    if device.type == "cuda":
        torch.cuda.set_device(device)


def resolve_backend(spec: DistributedSpec, device: torch.device) -> str:
    """The process-group backend: the recipe's, or nccl on CUDA and gloo on CPU for 'auto'."""
    if spec.backend != "auto":
        return spec.backend
    return "nccl" if device.type == "cuda" else "gloo"


def init_distributed(spec: DistributedSpec, device: torch.device) -> tuple[int, int]:
    """Start the process group when running under torchrun (or for DeepSpeed); (rank, world).

    Binds the process to `device` first (`torch.cuda.set_device(LOCAL_RANK)`), and passes
    `device_id` to an NCCL group so its communicator is created eagerly on that GPU. Several
    processes with `strategy: none` are refused: each would train its own copy of the model.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and spec.strategy == "none":
        raise RuntimeError(
            f"WORLD_SIZE={world} (a torchrun launch) with distributed.strategy=none: every rank "
            "would train its own copy of the model on its share of the data. Set "
            "distributed.strategy=fsdp2 (or deepspeed), or run one process without torchrun"
        )
    bind_device(device)
    needs_group = world > 1 or spec.strategy in ("fsdp2", "deepspeed")
    if needs_group and not dist.is_initialized():
        backend = resolve_backend(spec, device)
        if backend == "nccl" and device.type != "cuda":
            raise RuntimeError(
                "distributed.backend=nccl needs a CUDA device; set distributed.device=cuda "
                "(or backend=gloo for CPU runs)"
            )
        if world == 1:  # single process: a group of one, so FSDP2 / DeepSpeed work unchanged
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
            os.environ.setdefault("RANK", "0")
            os.environ.setdefault("LOCAL_RANK", "0")
            os.environ.setdefault("WORLD_SIZE", "1")
        timeout = datetime.timedelta(seconds=spec.timeout_s)
        if spec.strategy == "deepspeed":
            import deepspeed

            deepspeed.init_distributed(dist_backend=backend, timeout=timeout)
        else:
            kwargs: dict[str, Any] = {"timeout": timeout}
            if backend == "nccl":
                kwargs["device_id"] = device
            dist.init_process_group(backend, **kwargs)
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    if world > 1:
        raise RuntimeError("WORLD_SIZE > 1 but no process group; launch with torchrun")
    return 0, 1


# --------------------------------------------------------------------------------------------------
# Collectives: every tensor on the process group's device


def device_for_backend(backend: str, local_rank: int | None = None) -> torch.device:
    """Where a collective's tensors must live for a process-group backend name.

    NCCL reduces CUDA tensors only (`cuda:LOCAL_RANK`); gloo (and a mixed
    `cpu:gloo,cuda:nccl` group, which routes CPU tensors to gloo) takes CPU tensors.
    """
    name = str(backend).lower()
    if "nccl" in name and "gloo" not in name:
        rank = int(os.environ.get("LOCAL_RANK", "0")) if local_rank is None else local_rank
        return torch.device("cuda", rank)
    return torch.device("cpu")


def collective_device(group: Any = None) -> torch.device:
    """The device of the tensors a collective on `group` (default: the world) must use."""
    if not dist.is_initialized():
        return torch.device("cpu")
    return device_for_backend(dist.get_backend(group))


def _world() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def all_reduce_mean(values: dict[str, float]) -> dict[str, float]:
    """Average scalar metrics over ranks (identity in one process). Collective: every rank must
    pass the same keys."""
    if _world() == 1 or not values:
        return values
    keys = sorted(values)
    t = torch.tensor(
        [float(values[k]) for k in keys], dtype=torch.float64, device=collective_device()
    )
    dist.all_reduce(t)
    t /= dist.get_world_size()
    return dict(zip(keys, t.cpu().tolist()))


def all_reduce_sum(values: Sequence[float]) -> list[float]:
    """Element-wise sum over ranks of a float vector of the same length on every rank."""
    if _world() == 1:
        return [float(v) for v in values]
    t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=collective_device())
    dist.all_reduce(t)
    return t.cpu().tolist()


def all_reduce_max_int(value: int) -> int:
    """The largest `value` over ranks (e.g. micro-batches in a step)."""
    if _world() == 1:
        return int(value)
    t = torch.tensor([int(value)], dtype=torch.int64, device=collective_device())
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.item())


def all_gather_floats(values: Sequence[float]) -> list[list[float]]:
    """Every rank's float vector (lengths may differ), in rank order."""
    if _world() == 1:
        return [[float(v) for v in values]]
    device = collective_device()
    width = all_reduce_max_int(len(values))
    row = torch.zeros(width + 1, dtype=torch.float64, device=device)
    row[0] = len(values)
    if values:
        row[1 : len(values) + 1] = torch.tensor([float(v) for v in values], dtype=torch.float64)
    rows = [torch.empty_like(row) for _ in range(dist.get_world_size())]
    dist.all_gather(rows, row)
    out = []
    for r in rows:
        r = r.cpu()
        out.append(r[1 : int(r[0].item()) + 1].tolist())
    return out
