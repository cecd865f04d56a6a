"""Model loading, token batches with images, and per-token log-probabilities.

One batch format serves SFT and RL: each sequence is token ids, a 0/1 mask of the tokens to train
on, optional per-token values (old log-probs, advantages) and the `ImageChunk`s that
`paravt.core.engines.hf.HFEngine` produced for its `<|image_pad|>` tokens. Sequences are
right-padded; images of all sequences are concatenated in order, as the Qwen-VL forward expects.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from paravt.core import Frame, Message, TextPart, render_frames
from paravt.core.tiny import build_tiny_qwen3vl
from paravt.train.numerics import apply_matmul_setting
from paravt.train.process_group import all_reduce_max_int
from paravt.train.ranks import barrier, is_rank0
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
        if is_rank0():
            log.info("building the tiny Qwen3-VL at %s (seed %d)", path, spec.tiny_seed)
            build_tiny_qwen3vl(path, seed=spec.tiny_seed)
        barrier()
    if path.exists() or spec.build_tiny:
        return path
    return spec.path  # a hub id


def load_model_and_processor(
    spec: ModelSpec,
    device: torch.device,
    *,
    path: str | Path | None = None,
    dtype: torch.dtype | None = None,
) -> tuple[Any, Any]:
    """`AutoModelForImageTextToText` + `AutoProcessor` from the recipe's model (or `path`), in
    `dtype` (default: the recipe's compute dtype; FSDP2 loads fp32 master weights and casts with
    its mixed-precision policy)."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    source = path if path is not None else ensure_model(spec)
    dtype = dtype or pick_dtype(spec, device)
    model = AutoModelForImageTextToText.from_pretrained(
        str(source), dtype=dtype, attn_implementation=spec.attn_implementation
    ).to(device)
    apply_matmul_setting(model, spec.bf16_matmul)
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
    # filled by the RL trainer's log-prob pass: proximal (policy before the step) and reference
    prox_logprobs: list[float] | None = None
    ref_logprobs: list[float] | None = None

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
    prox = torch.zeros((n, width), dtype=torch.float32)
    ref = torch.zeros((n, width), dtype=torch.float32)
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
        if s.prox_logprobs is not None:
            prox[i, :L] = torch.tensor(s.prox_logprobs, dtype=torch.float32)
        if s.ref_logprobs is not None:
            ref[i, :L] = torch.tensor(s.ref_logprobs, dtype=torch.float32)
        chunks.extend(s.media)
    batch: dict[str, Any] = {
        "input_ids": ids.to(device),
        "attention_mask": attn.to(device),
        "mask": mask.to(device),
        "old_logprobs": old.to(device),
        "advantages": adv.to(device),
        "prox_logprobs": prox.to(device),
        "ref_logprobs": ref.to(device),
    }
    if chunks:
        batch["pixel_values"] = torch.cat([c.pixel_values for c in chunks]).to(device)
        batch["image_grid_thw"] = torch.stack([c.grid_thw for c in chunks]).to(device)
        batch["mm_token_type_ids"] = (ids == image_token_id).int().to(device)
    return batch


def model_inputs(model: Any, batch: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments of a Qwen-VL forward for a `collate` batch."""
    inputs: dict[str, Any] = {k: batch[k] for k in ("input_ids", "attention_mask") if k in batch}
    if "pixel_values" in batch:
        dtype = next(p for p in model.parameters() if p.is_floating_point()).dtype
        inputs["pixel_values"] = batch["pixel_values"].to(dtype)
        inputs["image_grid_thw"] = batch["image_grid_thw"]
        inputs["mm_token_type_ids"] = batch["mm_token_type_ids"]
    return inputs


def token_logprobs_full(
    model: Any, batch: dict[str, Any], *, temperature: float = 1.0
) -> torch.Tensor:
    """Log-probability of every token given the ones before it, shape (B, T); position 0 is 0.

    The plain computation (full-vocabulary fp32 logits at every position: B x T x V floats); kept
    as the reference `token_logprobs` is tested and benchmarked against.
    """
    logits = model(**model_inputs(model, batch), use_cache=False).logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    ids = batch["input_ids"]
    lp = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    return torch.nn.functional.pad(lp, (1, 0))


def _inner(model: Any) -> Any:
    """The transformers model behind a DeepSpeed engine (FSDP2 modules are the model itself)."""
    wrapped = model.__dict__.get("_modules", {}).get("module")
    return wrapped if isinstance(wrapped, torch.nn.Module) else model


def chunked_target_logprobs(
    head: torch.nn.Module,
    hidden: torch.Tensor,
    targets: torch.Tensor,
    *,
    temperature: float = 1.0,
    chunk: int = 1024,
) -> torch.Tensor:
    """log softmax(head(hidden) / temperature)[target] for N positions, `chunk` at a time.

    `hidden` (N, H) and `targets` (N,). With autograd on, each chunk is checkpointed: only its
    hidden states are kept, and its logits are recomputed in backward, so peak memory is one
    chunk's logits (chunk x vocabulary fp32), whatever N is.
    """
    from torch.utils.checkpoint import checkpoint

    def piece(h: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        logits = head(h).float()
        if temperature != 1.0:
            logits = logits / temperature
        return logits.gather(-1, t[:, None]).squeeze(-1) - torch.logsumexp(logits, dim=-1)

    out = []
    for s in range(0, hidden.shape[0], chunk):
        h, t = hidden[s : s + chunk], targets[s : s + chunk]
        if torch.is_grad_enabled() and h.requires_grad:
            out.append(checkpoint(piece, h, t, use_reentrant=False))
        else:
            out.append(piece(h, t))
    return torch.cat(out) if out else hidden.new_zeros(0, dtype=torch.float32)


class _SelectedLogProbHead(torch.nn.Module):
    """Stands in for `lm_head` during one forward: instead of logits at every position it returns
    the log-probs of the selected next tokens (`chunked_target_logprobs`). It runs inside the
    model's forward, so FSDP2 / ZeRO-3 have the head's weight gathered as usual."""

    def __init__(
        self,
        head: torch.nn.Module,
        rows: torch.Tensor,
        cols: torch.Tensor,
        targets: torch.Tensor,
        temperature: float,
        chunk: int,
    ) -> None:
        super().__init__()
        self.head = head
        self.rows, self.cols, self.targets = rows, cols, targets
        self.temperature, self.chunk = temperature, chunk

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        picked = hidden[self.rows, self.cols]
        return chunked_target_logprobs(
            self.head, picked, self.targets, temperature=self.temperature, chunk=self.chunk
        )


# What Qwen-VL forwards return beside the logits: the vision encoder's outputs, kept for callers
# that reuse them (transformers' `mm_encoder_outputs`). Per image they are `torch.split` views of
# the encoder's output (`pooler_output`, `deepstack_features`), still on the autograd graph.
_ENCODER_OUTPUTS = ("image_outputs", "video_outputs")


def _logits_only(module: torch.nn.Module, args: Any, output: Any) -> Any:
    """Forward hook of `token_logprobs`, ahead of FSDP2's post-forward hook: the output without
    `_ENCODER_OUTPUTS`, which nothing here reads.

    FSDP2 hooks every grad-requiring tensor of its root's output for its pre-backward, and warns
    that an in-place op on a view among them would silently drop that hook (torch 2.14,
    `_fsdp_state._register_pre_backward_hook`). The views were the encoder's per-image splits, not
    the logits; without them the root returns only `logits`, a fresh tensor (`torch.cat`), and
    the warning stays meaningful for what is used."""
    if not isinstance(output, Mapping) or not any(k in output for k in _ENCODER_OUTPUTS):
        return output
    return type(output)(**{k: v for k, v in output.items() if k not in _ENCODER_OUTPUTS})


def token_logprobs(
    model: Any,
    batch: dict[str, Any],
    *,
    temperature: float = 1.0,
    mask: torch.Tensor | None = None,
    chunk: int = 1024,
) -> torch.Tensor:
    """Log-probability of each token given the ones before it, shape (B, T); position 0 is 0.

    Computed from logits / temperature (the quantity the HF engine records while sampling), only
    at positions where `mask` (B, T) is non-zero (others are 0; default: every position) and
    `chunk` positions at a time, so no (T x vocabulary) logits tensor is ever built. When the mask
    selects nothing, one position is still computed (weight 0 in any masked loss) so that the
    backward pass reaches every parameter the forward used: sharded backends reduce gradients
    per parameter group and would otherwise leave this rank out of a collective.
    """
    ids = batch["input_ids"]
    want = torch.ones_like(ids, dtype=torch.bool) if mask is None else mask.bool()
    want = want.clone()
    want[:, 0] = False  # the first token has no prediction
    rows, cols = want[:, 1:].nonzero(as_tuple=True)  # cols: the predicting position
    if rows.numel() == 0:
        rows = torch.zeros(1, dtype=torch.long, device=ids.device)
        cols = torch.zeros(1, dtype=torch.long, device=ids.device)
    targets = ids[rows, cols + 1]
    inner = _inner(model)
    head = inner.lm_head
    inner.lm_head = _SelectedLogProbHead(head, rows, cols, targets, temperature, chunk)
    hook = inner.register_forward_hook(_logits_only, prepend=True)
    try:
        picked = model(**model_inputs(model, batch), use_cache=False).logits
    finally:
        hook.remove()
        inner.lm_head = head
    out = torch.zeros(ids.shape, dtype=torch.float32, device=picked.device)
    return out.index_put((rows, cols + 1), picked.float())


# --------------------------------------------------------------------------------------------------
# Equal micro-batch counts on every rank


def filler_sequence(encoder: Any) -> Sequence_:
    """A short sequence with one small image and no trained token: the content of padding
    micro-batches and of micro-batches that carry no image (see `balance_micro_batches`)."""
    import numpy as np

    frame = Frame(np.zeros((32, 32, 3), dtype=np.uint8), 0.0)
    encoded = encoder.encode_prompt([Message("user", [*render_frames([frame]), TextPart(".")])])
    ids = list(encoded.token_ids)
    return Sequence_(ids, [0] * len(ids), list(encoded.media))


def balance_micro_batches(
    micro: list[list[Sequence_]], filler: Sequence_, *, world: int
) -> list[list[Sequence_]]:
    """The same number of micro-batches on every rank, each running the vision tower.

    Sharded backends (FSDP2, ZeRO) all-gather parameters in forward and reduce gradients in
    backward, per block: ranks must run the same number of forward/backward passes through the
    same blocks, or a collective waits forever. So (collective) the ranks agree on the largest
    count, shorter ranks append `filler`-only micro-batches (mask 0: zero loss, same passes; a
    rank with no rows at all still takes part), and a micro-batch without any image gets `filler`
    appended so the vision blocks run on every rank. One process: unchanged.
    """
    if world <= 1:
        return micro
    target = all_reduce_max_int(len(micro))
    out = [mb if any(s.media for s in mb) else [*mb, filler] for mb in micro]
    out += [[filler] for _ in range(target - len(out))]
    return out
