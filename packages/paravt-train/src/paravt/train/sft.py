"""Cold-start SFT, one readable recipe: setup -> data -> loop -> checkpoint.

Tokenisation goes through the model's own processor and chat template, by the same engine calls
the agent runtime uses (`encode_prompt`, `encode_generation`, `encode_continuation` of
`paravt.core.engines.hf.HFEngine`), so a supervised trace and an RL rollout of the same
conversation are the same tokens. Only assistant tokens (their content and the end-of-turn token)
carry loss; system, user and tool tokens, images and the assistant header do not.
"""

from __future__ import annotations

import logging
import math
import random
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from paravt.core.protocol import Message
from paravt.train.checkpoint import (
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
    save_hf,
    truncate_metrics,
)
from paravt.train.distributed import Backend, all_reduce_mean, barrier, init_distributed
from paravt.train.metrics import MetricsLogger, RowOrder
from paravt.train.modeling import (
    Sequence_,
    collate,
    load_model_and_processor,
    pick_device,
    token_logprobs,
)
from paravt.train.recipe import SFTRecipe

log = logging.getLogger("paravt.train")


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def encode_conversation(engine: Any, messages: Sequence[Message]) -> Sequence_:
    """Token ids of a whole conversation with mask 1 exactly on the assistant tokens.

    In: an `HFEngine` (only its encoders are used) and core `Message`s whose first message is not
    from the assistant. Out: a `Sequence_` with ids, mask and the processed images in order.
    """
    messages = list(messages)
    first = next((i for i, m in enumerate(messages) if m.role == "assistant"), None)
    if first is None or first == 0:
        raise ValueError(
            "an SFT conversation needs context messages followed by at least one assistant message"
        )
    encoded = engine.encode_prompt(messages[:first])
    ids, mask, media = list(encoded.token_ids), [0] * len(encoded.token_ids), list(encoded.media)
    i = first
    while i < len(messages):
        generated = engine.encode_generation(messages[i].text, end_turn=True)
        ids += generated.token_ids
        mask += [1] * len(generated.token_ids)
        j = i + 1
        while j < len(messages) and messages[j].role != "assistant":
            j += 1
        if j < len(messages):  # more turns follow: tool responses etc., then the next header
            cont = engine.encode_continuation(messages[i + 1 : j], previous=generated)
            ids += cont.token_ids
            mask += [0] * len(cont.token_ids)
            media += cont.media
        i = j
    return Sequence_(ids, mask, media)


def pack_micro_batches(
    seqs: list[Sequence_], *, batch_size: int, packing_length: int | None
) -> list[list[Sequence_]]:
    """Split one step's sequences into micro-batches: `batch_size` each, or (packing) first-fit
    decreasing bins of at most `packing_length` padded tokens. Sequences are never concatenated,
    so no token attends across samples."""
    if packing_length is None:
        return [seqs[i : i + batch_size] for i in range(0, len(seqs), batch_size)]
    bins: list[list[Sequence_]] = []
    for s in sorted(seqs, key=len, reverse=True):
        for b in bins:
            if max(len(s), *(len(x) for x in b)) * (len(b) + 1) <= packing_length:
                b.append(s)
                break
        else:
            bins.append([s])
    return bins


def sft_loss(model: Any, batch: dict[str, Any], total_tokens: float) -> tuple[torch.Tensor, float]:
    """Summed NLL of the supervised tokens divided by the step's supervised-token count."""
    lp = token_logprobs(model, batch)
    nll = -(lp * batch["mask"]).sum()
    return nll / total_tokens, float(nll.detach())


def example_messages_factory(recipe: SFTRecipe) -> Callable[[Any], list[Message]]:
    """How an `SFTExample` becomes core messages with frames (decoded by paravt-tools)."""
    from paravt.train.frames import FrameSource

    source = FrameSource(recipe.video)
    return source.messages_of


def _load_examples(recipe: SFTRecipe) -> list[Any]:
    from paravt.train.data import read_sft_rows
    from paravt.train.frames import ensure_synth

    ensure_synth(recipe.data)
    examples, report = read_sft_rows(
        recipe.data.parquet, root=recipe.data.root, max_rows=recipe.data.max_rows
    )
    log.info("SFT data: %s", report)
    return examples


def train_sft(
    recipe: SFTRecipe,
    *,
    resume: bool = False,
    conversations: Sequence[list[Message]] | None = None,
) -> Path:
    """Run supervised fine-tuning as the recipe says; returns the `final/` model directory.

    `conversations` (core messages) replaces the recipe's parquet data (tests, custom data).
    """
    from paravt.core.engines.hf import HFEngine

    out = Path(recipe.output_dir)
    device = pick_device(recipe.distributed.device)
    rank, world = init_distributed(recipe.distributed, device)
    seed_everything(recipe.seed + rank)

    ckpt = latest_checkpoint(out) if resume else None
    model, processor = load_model_and_processor(recipe.model, device, path=ckpt)
    engine = HFEngine(model, processor)  # tokenisation through the model's own chat template
    pad_id, image_id = engine.pad_token_id, engine.image_token_id
    backend = Backend(model, recipe.distributed, recipe.optim, recipe.max_steps)
    start = 0
    order_state = None
    if ckpt is not None:
        state = load_checkpoint(ckpt, backend)
        start, order_state = int(state["step"]), state["data"]
        truncate_metrics(out / "metrics.jsonl", start)
        log.info("resumed from %s at step %d", ckpt, start)
    elif rank == 0 and (out / "metrics.jsonl").exists():
        (out / "metrics.jsonl").unlink()

    if conversations is not None:
        rows: list[Any] = list(conversations)
        to_messages: Callable[[Any], list[Message]] = list
    else:
        rows = _load_examples(recipe)
        to_messages = example_messages_factory(recipe)
    cache: dict[int, Sequence_] = {}

    def encoded(i: int) -> Sequence_ | None:
        if i not in cache:
            seq = encode_conversation(engine, to_messages(rows[i]))
            if len(seq) > recipe.sft.max_length:
                log.warning("row %d has %d tokens > sft.max_length; skipped", i, len(seq))
                return None
            cache[i] = seq
        return cache[i]

    order = RowOrder(len(rows), recipe.seed, recipe.data.shuffle)
    if order_state is not None:
        order.load(order_state)
    per_step = recipe.sft.batch_size * recipe.sft.grad_accum
    logger = MetricsLogger(out, recipe.logging, rank=rank, total=recipe.max_steps, initial=start)
    packing = recipe.sft.packing_length if recipe.sft.packing else None
    model.train()
    for step in range(start + 1, recipe.max_steps + 1):
        t0 = time.perf_counter()
        picked = order.take(per_step * world)[rank * per_step : (rank + 1) * per_step]
        seqs = [s for s in (encoded(i) for i in picked) if s is not None]
        micro = pack_micro_batches(seqs, batch_size=recipe.sft.batch_size, packing_length=packing)
        total = float(sum(sum(s.mask) for s in seqs)) or 1.0
        loss_sum = 0.0
        for k, mb in enumerate(micro):
            batch = collate(mb, pad_id=pad_id, image_token_id=image_id, device=device)
            loss, nll = sft_loss(backend.forward_module(), batch, total)
            backend.backward(loss, last=k == len(micro) - 1)
            loss_sum += nll
        if not micro:  # every row was too long: keep ranks in step with a zero update
            log.warning("step %d had no usable rows", step)
        grad_norm = backend.step()
        metrics = all_reduce_mean(
            {
                "loss": loss_sum / total,
                "grad_norm": grad_norm,
                "tokens/supervised": total,
                "tokens/total": float(sum(len(s) for s in seqs)),
                "time/step_s": time.perf_counter() - t0,
            }
        )
        metrics["lr"] = backend.lr
        metrics["epoch"] = order.epoch
        logger.log(step, metrics, bar={"loss": metrics["loss"]})
        if recipe.checkpoint.every_steps and step % recipe.checkpoint.every_steps == 0:
            save_checkpoint(
                out,
                step,
                backend,
                processor,
                data_state=order.state(),
                keep_last=recipe.checkpoint.keep_last,
            )
    logger.close()
    final = out / "final"
    if recipe.checkpoint.save_final:
        save_final(final, backend, processor)
    return final


def save_final(final: Path, backend: Backend, processor: Any) -> None:
    """The HF-loadable final model, written to a temporary directory and renamed (collective)."""
    state = backend.full_model_state()
    rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
    if rank == 0:
        tmp = final.with_name(f".tmp-{final.name}")
        shutil.rmtree(tmp, ignore_errors=True)
        save_hf(tmp, backend.model, processor, state)
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
    barrier()


def mean_or_nan(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else math.nan
