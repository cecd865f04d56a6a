"""Model loading, token batches with images, and per-token log-probabilities.

One batch format serves SFT and RL: each sequence is token ids, a 0/1 mask of the tokens to train
on, optional per-token values (old log-probs, advantages) and the `ImageChunk`s that
`paravt.core.engines.hf.HFEngine` produced for its `<|image_pad|>` tokens. Sequences are
right-padded; images of all sequences are concatenated in order, as the Qwen-VL forward expects.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from paravt.train.recipe import ModelSpec

log = logging.getLogger("paravt.train")


def pick_device(choice: str = "auto") -> torch.device:
    if choice == "cuda" or (choice == "auto" and torch.cuda.is_available()):
        rank = int(os.environ.get("LOCAL_RANK", "0"))
        return torch.device("cuda", rank)
    return torch.device("cpu")


def pick_dtype(spec: ModelSpec, device: torch.device) -> torch.dtype:
    if spec.dtype == "float32":
        return torch.float32
    if spec.dtype == "bfloat16":
        return torch.bfloat16
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def ensure_model(spec: ModelSpec) -> Path | str:
    """The model path, building the tiny Qwen3-VL there first when the recipe asks for it.

    Under torchrun only rank 0 builds; the others wait at a barrier.
    """
    path = Path(spec.path)
    if spec.build_tiny and not (path / "config.json").is_file():
        import torch.distributed as dist

        rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
        if rank == 0:
            from paravt.core.tiny import build_tiny_qwen3vl

            log.info("building the tiny Qwen3-VL at %s (seed %d)", path, spec.tiny_seed)
            build_tiny_qwen3vl(path, seed=spec.tiny_seed)
        if dist.is_available() and dist.is_initialized():
            dist.barrier()
    if path.exists() or spec.build_tiny:
        return path
    return spec.path  # a hub id


def load_model_and_processor(
    spec: ModelSpec, device: torch.device, *, path: str | Path | None = None
) -> tuple[Any, Any]:
    """`AutoModelForImageTextToText` + `AutoProcessor` from the recipe's model (or `path`)."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    source = path if path is not None else ensure_model(spec)
    dtype = pick_dtype(spec, device)
    model = AutoModelForImageTextToText.from_pretrained(
        str(source), dtype=dtype, attn_implementation=spec.attn_implementation
    ).to(device)
    processor = AutoProcessor.from_pretrained(str(source))
    if spec.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False
    return model, processor


@dataclass
class Sequence_:
    """One training sequence (see module docstring)."""

    token_ids: list[int]
    mask: list[int]
    media: list[Any] = field(default_factory=list)
    old_logprobs: list[float] | None = None
    advantages: list[float] | None = None  # per token (a scalar advantage broadcast)

    def __len__(self) -> int:
        return len(self.token_ids)


def collate(
    seqs: Sequence[Sequence_], *, pad_id: int, image_token_id: int, device: torch.device
) -> dict[str, Any]:
    """Right-padded tensors plus concatenated image inputs for one micro-batch."""
    width = max(len(s) for s in seqs)
    n = len(seqs)
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    attn = torch.zeros((n, width), dtype=torch.long)
    mask = torch.zeros((n, width), dtype=torch.float32)
    old = torch.zeros((n, width), dtype=torch.float32)
    adv = torch.zeros((n, width), dtype=torch.float32)
    chunks: list[Any] = []
    for i, s in enumerate(seqs):
        L = len(s)
        ids[i, :L] = torch.tensor(s.token_ids, dtype=torch.long)
        attn[i, :L] = 1
        mask[i, :L] = torch.tensor(s.mask, dtype=torch.float32)
        if s.old_logprobs is not None:
            old[i, :L] = torch.tensor(s.old_logprobs, dtype=torch.float32)
        if s.advantages is not None:
            adv[i, :L] = torch.tensor(s.advantages, dtype=torch.float32)
        chunks.extend(s.media)
    batch: dict[str, Any] = {
        "input_ids": ids.to(device),
        "attention_mask": attn.to(device),
        "mask": mask.to(device),
        "old_logprobs": old.to(device),
        "advantages": adv.to(device),
    }
    if chunks:
        batch["pixel_values"] = torch.cat([c.pixel_values for c in chunks]).to(device)
        batch["image_grid_thw"] = torch.stack([c.grid_thw for c in chunks]).to(device)
        batch["mm_token_type_ids"] = (ids == image_token_id).int().to(device)
    return batch


def token_logprobs(model: Any, batch: dict[str, Any], *, temperature: float = 1.0) -> torch.Tensor:
    """Log-probability of every token given the ones before it, shape (B, T); position 0 is 0.

    Computed from logits / temperature, the same quantity the HF engine records while sampling.
    """
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask") if k in batch}
    if "pixel_values" in batch:
        dtype = next(p for p in model.parameters() if p.is_floating_point()).dtype
        inputs["pixel_values"] = batch["pixel_values"].to(dtype)
        inputs["image_grid_thw"] = batch["image_grid_thw"]
        inputs["mm_token_type_ids"] = batch["mm_token_type_ids"]
    logits = model(**inputs, use_cache=False).logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    ids = batch["input_ids"]
    lp = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    return torch.nn.functional.pad(lp, (1, 0))


def make_scheduler(optimizer: torch.optim.Optimizer, optim: Any, total_steps: int) -> Any:
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


def make_optimizer(params: Any, optim: Any) -> torch.optim.Optimizer:
    return torch.optim.AdamW(
        params,
        lr=optim.lr,
        betas=tuple(optim.betas),
        eps=optim.eps,
        weight_decay=optim.weight_decay,
    )
