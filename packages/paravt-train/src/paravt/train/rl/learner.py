"""The update: micro-batches balanced over ranks, the log-prob pass (proximal and reference), the KL
reward, and the PPO / decoupled loss over mini-batches, one optimiser step each."""

from __future__ import annotations

import logging
import time
from dataclasses import fields
from itertools import pairwise
from typing import Any

import torch

from paravt.train.distributed import Backend
from paravt.train.losses import LossSettings, kl_reward_to_go, ppo_loss, step_normaliser
from paravt.train.modeling import (
    Sequence_,
    balance_micro_batches,
    collate,
    token_logprobs,
)
from paravt.train.process_group import all_reduce_sum
from paravt.train.recipe import LossSpec, RLRecipe

log = logging.getLogger("paravt.train")
_warned_fewer_steps: list[bool] = []  # `ppo_update` said once that mini-batches were fewer


def _micro_batches(
    seqs: list[Sequence_], size: int, filler: Sequence_ | None, world: int
) -> list[list[Sequence_]]:
    """`size` trajectories per micro-batch, balanced over ranks (`balance_micro_batches`)."""
    mbs = [seqs[i : i + size] for i in range(0, len(seqs), size)]
    if filler is None:
        return mbs
    return balance_micro_batches(mbs, filler, world=world)


def logprob_pass(
    backend: Backend,
    ref_model: Any,
    mbs: list[list[Sequence_]],
    loss_cfg: LossSpec,
    *,
    temperature: float,
    chunk: int,
    pad_id: int,
    image_id: int,
    device: torch.device,
) -> None:
    """Before the update, without gradients: the proximal log-probs (the policy as it is now,
    for the decoupled loss) and the reference's (for the KL), stored on each sequence at its
    trained positions. Forward passes on sharded models are collectives: every rank runs the
    same (balanced) micro-batches."""
    need_ref = ref_model is not None and loss_cfg.kl_coef > 0
    if not (loss_cfg.decoupled or need_ref):
        return
    module = backend.forward_module()
    with torch.no_grad():
        for mb in mbs:
            batch = collate(mb, pad_id=pad_id, image_token_id=image_id, device=device)
            mask = batch["mask"]
            prox = ref = None
            if loss_cfg.decoupled:
                prox = token_logprobs(
                    module, batch, temperature=temperature, mask=mask, chunk=chunk
                )
            if need_ref:
                ref = token_logprobs(
                    ref_model, batch, temperature=temperature, mask=mask, chunk=chunk
                )
            for i, s in enumerate(mb):
                n = len(s)
                if prox is not None:
                    s.prox_logprobs = prox[i, :n].cpu().tolist()
                if ref is not None:
                    s.ref_logprobs = ref[i, :n].cpu().tolist()


def add_kl_reward(seqs: list[Sequence_], kl_coef: float) -> None:
    """`loss.kl_form=k1_reward`: each trained token's advantage gets the KL return
    (`losses.kl_reward_to_go` of behaviour vs reference log-probs), in place."""
    for s in seqs:
        if s.ref_logprobs is None or s.old_logprobs is None or s.advantages is None:
            continue
        kl = kl_reward_to_go(s.old_logprobs, s.ref_logprobs, s.mask, kl_coef)
        s.advantages = [a + k for a, k in zip(s.advantages, kl)]


def loss_settings(loss_cfg: LossSpec) -> LossSettings:
    """The settings `ppo_loss` reads from the recipe's `loss` section: its fields of the same
    names."""
    return LossSettings(**loss_cfg.model_dump(include={f.name for f in fields(LossSettings)}))


def mini_batch_slices(count: int, parts: int) -> list[slice]:
    """`count` micro-batches cut into `parts` contiguous runs as even as possible (at most
    `count` runs, none empty). Every rank holds the same count (`balance_micro_batches`), so every
    rank makes the same optimiser steps over the same number of passes."""
    parts = max(1, min(parts, count))
    edges = [round(i * count / parts) for i in range(parts + 1)]
    return [slice(a, b) for a, b in pairwise(edges)]


def ppo_update(
    backend: Backend,
    ref_model: Any,
    seqs: list[Sequence_],
    recipe: RLRecipe,
    *,
    pad_id: int,
    image_id: int,
    device: torch.device,
    filler: Sequence_ | None = None,
) -> dict[str, float]:
    """The update of one RL step over `seqs`: `loss.ppo_epochs` passes over
    `loss.ppo_mini_batches` mini-batches, one optimiser step each (micro-batched, gradients
    accumulated); loss metrics averaged over every pass.

    With one mini-batch and one epoch (the default) the ratio to the rollout's log-probs is 1
    at the step and the clip never acts; from a second optimiser step on, the policy has moved
    since the rollout and the clip bounds how far a batch can push it (verl's
    `ppo_mini_batch_size` and `ppo_epochs`). The learning-rate schedule advances once per RL
    step, whatever the number of optimiser steps in it.

    In train mode (gradient checkpointing active). Every rank runs the same number of
    micro-batches (`filler` pads; required under torchrun), and each mini-batch's loss is
    normalised over that mini-batch on all ranks, so its gradient is that of one process holding
    every rank's part of it. Order: log-prob pass (proximal / reference), KL reward
    (k1_reward), the updates.
    """

    loss_cfg = recipe.loss
    temperature = recipe.rollout.temperature or 1.0
    chunk = recipe.model.logprob_chunk_tokens
    settings = loss_settings(loss_cfg)
    world = backend.world_size
    mbs = _micro_batches(seqs, loss_cfg.micro_batch_size, filler, world)
    slices = mini_batch_slices(len(mbs), loss_cfg.ppo_mini_batches)
    if len(slices) < loss_cfg.ppo_mini_batches and not _warned_fewer_steps:
        _warned_fewer_steps.append(True)  # once per process: the same on every step that has it
        log.warning(
            "loss.ppo_mini_batches=%d, but this step has %d micro-batches "
            "(loss.micro_batch_size=%d): it takes %d optimiser steps, one per micro-batch "
            "(metric optimizer_steps); lower loss.micro_batch_size for more",
            loss_cfg.ppo_mini_batches,
            len(mbs),
            loss_cfg.micro_batch_size,
            len(slices),
        )
    backend.model.train()
    t0 = time.perf_counter()
    logprob_pass(
        backend,
        ref_model,
        mbs,
        loss_cfg,
        temperature=temperature,
        chunk=chunk,
        pad_id=pad_id,
        image_id=image_id,
        device=device,
    )
    t_logprob = time.perf_counter() - t0
    kl_in_reward = loss_cfg.kl_form == "k1_reward" and ref_model is not None
    if kl_in_reward and loss_cfg.kl_coef > 0:
        add_kl_reward(seqs, loss_cfg.kl_coef)
    # one all-reduce for every mini-batch's normaliser (the same count on every rank)
    normalisers = all_reduce_sum(
        [
            step_normaliser(loss_cfg.aggregation, [s.mask for mb in mbs[sl] for s in mb])
            for sl in slices
        ]
    )
    sums = {k: 0.0 for k in ("pg", "kl", "clip_fraction", "ratio", "tokens", "behav", "masked")}
    loss_total = 0.0
    grad_norms: list[float] = []
    module = backend.forward_module()
    use_ref = ref_model is not None and loss_cfg.kl_coef > 0
    for _ in range(loss_cfg.ppo_epochs):
        for sl, global_norm in zip(slices, normalisers):
            if global_norm == 0:  # no rank trains a token of it: no step (AdamW's momentum and
                continue  # decay would move the weights all the same); the same on every rank
            norm = max(global_norm, 1.0) / backend.grad_average_ranks
            part = mbs[sl]
            for k, mb in enumerate(part):
                batch = collate(mb, pad_id=pad_id, image_token_id=image_id, device=device)
                mask = batch["mask"].clone()
                mask[:, 0] = 0.0  # the first token has no prediction
                lp = token_logprobs(module, batch, temperature=temperature, mask=mask, chunk=chunk)
                parts = ppo_loss(
                    lp,
                    batch["old_logprobs"],
                    batch["advantages"],
                    mask,
                    settings,
                    norm=norm,
                    ref_logp=batch["ref_logprobs"] if use_ref else None,
                    prox_logp=batch["prox_logprobs"] if loss_cfg.decoupled else None,
                )
                backend.backward(parts.loss, last=k == len(part) - 1)
                loss_total += float(parts.loss.detach())
                w = parts.tokens
                sums["pg"] += parts.pg * w
                sums["kl"] += parts.kl * w
                sums["clip_fraction"] += parts.clip_fraction * w
                sums["ratio"] += parts.ratio_mean * w
                sums["behav"] += parts.behav_weight_mean * w
                sums["masked"] += parts.behav_masked_fraction * w
                sums["tokens"] += w
            grad_norms.append(backend.step(advance_schedule=False))
    backend.advance_schedule()
    tok = sums["tokens"] or 1.0
    passes = len(grad_norms) or 1
    return {
        "loss": loss_total / passes,
        "loss/pg": sums["pg"] / tok,
        "loss/normaliser": sum(normalisers),
        "kl": sums["kl"] / tok,
        "clip_fraction": sums["clip_fraction"] / tok,
        "ratio_mean": sums["ratio"] / tok,
        "behav_weight_mean": sums["behav"] / tok,
        "behav_masked_fraction": sums["masked"] / tok,
        "grad_norm": sum(grad_norms) / passes,
        "grad_norm_max": max(grad_norms, default=0.0),
        "optimizer_steps": float(len(grad_norms)),
        "tokens/trained": sums["tokens"] / loss_cfg.ppo_epochs,
        "trajectories/trained": float(len(seqs)),
        "micro_batches": float(len(mbs)),
        "time/logprob_s": t_logprob,
    }
