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
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from paravt.core import Message
from paravt.core.engines import HFChatEncoder, HFEngine
from paravt.train.data import read_sft_rows
from paravt.train.distributed import Backend
from paravt.train.examples import load_examples
from paravt.train.frames import FrameSource
from paravt.train.metrics import RowOrder
from paravt.train.modeling import (
    Sequence_,
    balance_micro_batches,
    collate,
    filler_sequence,
    token_logprobs,
)
from paravt.train.process_group import all_reduce_mean, all_reduce_sum
from paravt.train.recipe import SFTRecipe
from paravt.train.runs import start_run

log = logging.getLogger("paravt.train")


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


def sft_loss(
    model: Any, batch: dict[str, Any], norm: float, *, chunk: int = 1024
) -> tuple[torch.Tensor, float]:
    """Summed NLL of the supervised tokens divided by `norm` (the step's supervised-token count
    over all ranks, divided by the ranks that average gradients); also the plain NLL sum."""
    lp = token_logprobs(model, batch, mask=batch["mask"], chunk=chunk)
    nll = -(lp * batch["mask"]).sum()
    return nll / norm, float(nll.detach())


def example_messages_factory(recipe: SFTRecipe) -> Callable[[Any], list[Message]]:
    """How an `SFTExample` becomes core messages with frames (decoded by paravt-tools)."""

    source = FrameSource(recipe.video)
    return source.messages_of


class EncodedRows(torch.utils.data.Dataset):  # type: ignore[type-arg, unused-ignore]
    """Row index -> (index, encoded `Sequence_` or None when longer than `max_length`).

    Frames are decoded and tokenised here, in DataLoader workers. Host memory holds the batches
    in flight (workers x prefetch) plus, when `cache_rows` > 0, at most that many encoded rows per
    worker (least recently used dropped first); 0 caches nothing."""

    def __init__(
        self,
        rows: Sequence[Any],
        to_messages: Callable[[Any], list[Message]],
        encoder: Any,
        max_length: int,
        cache_rows: int = 0,
    ) -> None:
        self.rows, self.to_messages, self.encoder = rows, to_messages, encoder
        self.max_length = max_length
        self.cache_rows = cache_rows
        self._cache: OrderedDict[int, Sequence_ | None] = OrderedDict()

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> tuple[int, Sequence_ | None]:
        if i in self._cache:
            self._cache.move_to_end(i)
            return i, self._cache[i]
        seq: Sequence_ | None = encode_conversation(self.encoder, self.to_messages(self.rows[i]))
        if seq is not None and len(seq) > self.max_length:
            log.warning("row %d has %d tokens > sft.max_length; skipped", i, len(seq))
            seq = None
        if self.cache_rows > 0:
            self._cache[i] = seq
            while len(self._cache) > self.cache_rows:
                self._cache.popitem(last=False)
        return i, seq


class StepRows(torch.utils.data.Sampler):  # type: ignore[type-arg, unused-ignore]
    """This rank's row indices of every step, drawn from the shared `RowOrder` (all ranks draw
    the same global take and keep their slice). The loader runs ahead of training by a bounded
    prefetch, so the order's state after each step's draw is kept (`state_after[step]`, popped
    by the trainer) for checkpoints to resume exactly at the next step."""

    def __init__(
        self, order: RowOrder, per_step: int, rank: int, world: int, start: int, end: int
    ) -> None:
        self.order, self.per_step, self.rank, self.world = order, per_step, rank, world
        self.steps = range(start + 1, end + 1)
        self.state_after: dict[int, dict[str, int]] = {}

    def __len__(self) -> int:
        return len(self.steps)

    def __iter__(self) -> Any:
        for step in self.steps:
            take = self.order.take(self.per_step * self.world)
            self.state_after[step] = self.order.state()
            yield take[self.rank * self.per_step : (self.rank + 1) * self.per_step]


def _as_list(items: list[Any]) -> list[Any]:
    return items


def train_sft(
    recipe: SFTRecipe,
    *,
    resume: bool = False,
    conversations: Sequence[list[Message]] | None = None,
    on_step: Callable[[int, Backend, dict[str, float]], None] | None = None,
) -> Path:
    """Run supervised fine-tuning as the recipe says; returns the `final/` model directory.

    `conversations` (core messages) replaces the recipe's parquet data (tests, custom data);
    `on_step(step, backend, metrics)` runs on every rank after each optimiser step (monitoring,
    tests; it may make collectives, the same on every rank).

    Every rank runs the same number of micro-batches per step (`balance_micro_batches`), and the
    loss is normalised by the supervised-token count of the whole step over all ranks, so the
    gradient equals that of one process training on all the step's rows.
    """

    run = start_run(recipe, resume=resume)
    logger = run.resume()
    rank, world, start, backend, device = run.rank, run.world, run.start, run.backend, run.device
    model, processor = run.model, run.processor
    engine = HFEngine(model, processor)  # tokenisation through the model's own chat template
    encoder = HFChatEncoder(processor, eos_token_ids=engine.eos_token_ids)  # no model: workers
    pad_id, image_id = engine.pad_token_id, engine.image_token_id
    filler = filler_sequence(encoder)
    order_state = run.data_state

    if conversations is not None:
        rows: list[Any] = list(conversations)
        to_messages: Callable[[Any], list[Message]] = list
    else:
        rows = load_examples(recipe.data, read_sft_rows, "SFT")
        to_messages = example_messages_factory(recipe)

    order = RowOrder(len(rows), recipe.seed, recipe.data.shuffle)
    if order_state is not None:
        order.load(order_state)
    per_step = recipe.sft.batch_size * recipe.sft.grad_accum
    sampler = StepRows(order, per_step, rank, world, start, recipe.max_steps)
    workers = recipe.sft.num_workers
    loader = torch.utils.data.DataLoader(
        EncodedRows(
            rows, to_messages, encoder, recipe.sft.max_length, cache_rows=recipe.sft.cache_rows
        ),
        batch_sampler=sampler,
        collate_fn=_as_list,
        num_workers=workers,
        prefetch_factor=2 if workers else None,
        persistent_workers=False,
    )
    packing = recipe.sft.packing_length if recipe.sft.packing else None
    chunk = recipe.model.logprob_chunk_tokens
    model.train()
    t0 = time.perf_counter()
    for step, items in zip(range(start + 1, recipe.max_steps + 1), loader):
        seqs = [s for _, s in items if s is not None]
        micro = pack_micro_batches(seqs, batch_size=recipe.sft.batch_size, packing_length=packing)
        micro = balance_micro_batches(micro, filler, world=world)
        if not seqs:
            log.warning("step %d had no usable rows on rank %d", step, rank)
        local_tokens = float(sum(sum(s.mask[1:]) for s in seqs))
        local_total = float(sum(len(s) for s in seqs))
        global_tokens, global_total = all_reduce_sum([local_tokens, local_total])
        norm = max(global_tokens, 1.0) / backend.grad_average_ranks
        loss_sum = 0.0
        for k, mb in enumerate(micro):
            batch = collate(mb, pad_id=pad_id, image_token_id=image_id, device=device)
            loss, nll = sft_loss(backend.forward_module(), batch, norm, chunk=chunk)
            backend.backward(loss, last=k == len(micro) - 1)
            loss_sum += nll
        grad_norm = backend.step()
        (global_nll,) = all_reduce_sum([loss_sum])
        metrics = all_reduce_mean({"time/step_s": time.perf_counter() - t0})
        metrics.update(
            {
                "loss": global_nll / max(global_tokens, 1.0),
                "grad_norm": grad_norm,
                "tokens/supervised": global_tokens,
                "tokens/total": global_total,
                "micro_batches": float(len(micro)),
            }
        )
        metrics["lr"] = backend.lr
        data_state = sampler.state_after.pop(step)
        metrics["epoch"] = data_state.get("epoch", order.epoch)
        logger.log(step, metrics, bar={"loss": metrics["loss"]})
        if on_step is not None:
            on_step(step, backend, metrics)
        run.checkpoint(step, data_state)
        t0 = time.perf_counter()
    return run.finish()


def mean_or_nan(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else math.nan
