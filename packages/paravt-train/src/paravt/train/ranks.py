"""Which process am I, and wait for the others: what every module asks (light: torch is imported
when asked)."""

from __future__ import annotations


def rank() -> int:
    """This process's rank in the default process group; 0 without one."""
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def is_rank0() -> bool:
    """Whether this process speaks for the run (logs, writes shared files, talks to servers)."""
    return rank() == 0


def barrier() -> None:
    """Wait for every rank (nothing without a process group)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
