"""The optimiser and learning-rate schedule a recipe asks for (built by `distributed.Backend`)."""

from __future__ import annotations

from typing import Any

import torch

from paravt.train.recipe import OptimSpec


def make_scheduler(optimizer: torch.optim.Optimizer, optim: OptimSpec, total_steps: int) -> Any:
    """The recipe's learning-rate schedule (transformers' schedule functions) for `total_steps`."""
    from transformers import (
        get_constant_schedule_with_warmup,
        get_cosine_with_min_lr_schedule_with_warmup,
        get_linear_schedule_with_warmup,
    )

    warmup = min(optim.warmup_steps, max(total_steps - 1, 0))
    if optim.schedule == "constant":
        return get_constant_schedule_with_warmup(optimizer, warmup)
    if optim.schedule == "linear":
        return get_linear_schedule_with_warmup(optimizer, warmup, total_steps)
    return get_cosine_with_min_lr_schedule_with_warmup(
        optimizer, warmup, total_steps, min_lr_rate=optim.min_lr_ratio
    )


def make_optimizer(params: Any, optim: OptimSpec) -> torch.optim.Optimizer:
    """AdamW with the recipe's learning rate, betas, eps and weight decay."""
    return torch.optim.AdamW(
        params,
        lr=optim.lr,
        betas=tuple(optim.betas),
        eps=optim.eps,
        weight_decay=optim.weight_decay,
    )
