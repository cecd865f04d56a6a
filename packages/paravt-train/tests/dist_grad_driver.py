"""Run by test_guard_distributed_gradient.py: the gradient of one RL update (`paravt.train.rl.ppo_update`)
on 2 gloo ranks with unequal work, and the one-process gradient of the same global batch.

    torchrun --standalone --nproc_per_node 2 dist_grad_driver.py MODEL OUT   # FSDP2, 2 ranks
    python dist_grad_driver.py MODEL OUT --reference                         # 1 process, all rows

The global batch is three tool conversations of different lengths: rank 0 trains the first (one
short sequence), rank 1 the other two (longer), so trained tokens, sequences and micro-batches all
differ per rank. Behaviour log-probs are the policy's own, moved by at most 0.1 (no clipping), and
advantages differ per sequence and sign. For each aggregation the real update runs from the same
initial weights; its gradient is read, unsharded, just before the optimiser step (after FSDP2's
gradient reduction) and written by rank 0 (and the reference) to OUT/grads-<tag>.pt with the
update's metrics; every rank writes its own trained-token count to OUT/<tag>-rank<R>.json.

FSDP2's warning that its root returned a grad-requiring view ("FSDP2-wrapped module ... returned
a view tensor", torch 2.14) is an error here: an in-place op on such a view drops the root's
pre-backward hook and its all-gather, silently. With our root (not resharded after forward) the
gradient stays right, so the comparison alone cannot see it; with a root resharded after forward
backward fails (mixed Tensor/DTensor). Only a view can lose the hook (an in-place op on a non-view
keeps it), so no view may leave the root.

Sabotage (`PARAVT_GRAD_SABOTAGE=inplace-view`, FSDP2 ranks only; test_distributed.py): the root
module's output `logits` becomes a view, and an in-place op that leaves its values unchanged
(`mul_(1.0)`) runs on it after the root's forward returns, before the loss: the run must fail.
`PARAVT_GRAD_AGGREGATIONS` (comma-separated) runs fewer aggregations.
"""

from __future__ import annotations

import json
import math
import os
import sys
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import torch
import torch.distributed as dist

from conftest import tool_conversation
from paravt.core.protocol import Message
from paravt.train import rl
from paravt.train.distributed import Backend
from paravt.train.modeling import (
    Sequence_,
    collate,
    filler_sequence,
    load_model_and_processor,
    pick_device,
    token_logprobs,
)
from paravt.train.process_group import init_distributed
from paravt.train.recipe import load_recipe
from paravt.train.sft import encode_conversation

AGGREGATIONS = ("token-mean", "seq-mean-token-mean")
ADVANTAGES = (1.0, -0.5, 2.0)  # per sequence
SHARDS = ((0,), (1, 2))  # rank -> sequences


def conversations() -> list[list[Message]]:
    short = tool_conversation("red", (255, 0, 0))
    long_a = tool_conversation("blue", (0, 0, 255))
    long_a[-1] = Message(
        "assistant",
        "<think>\n" + "The square is blue, as both windows show. " * 6 + "</think>"
        "<answer>blue</answer>",
    )
    long_b = tool_conversation("green", (0, 255, 0))
    long_b[-1] = Message(
        "assistant",
        "<think>\n" + "Green again and again. " * 10 + "</think><answer>green</answer>",
    )
    return [short, long_a, long_b]


def recipe_for(model: str, out: Path, aggregation: str, strategy: str):  # type: ignore[no-untyped-def]
    return load_recipe(
        "tiny_paragrpo",
        [
            f"model.path={model}",
            f"output_dir={out}",
            f"distributed.strategy={strategy}",
            "distributed.timeout_s=60",
            "model.dtype=float32",
            "loss.decoupled=true",  # the 8B recipes' loss: a log-prob pass before the update
            "loss.kl_coef=0",
            "loss.ppo_mini_batches=1",  # one optimiser step: its gradient is the one compared
            f"loss.aggregation={aggregation}",
            "loss.micro_batch_size=1",  # rank 0: 1 micro-batch (+ 1 filler), rank 1: 2
            "optim.max_grad_norm=0",
            "logging.progress=false",
        ],
    )


def build_sequences(model: Any, engine: Any, recipe: Any, device: torch.device) -> list[Sequence_]:
    """All three sequences, on the unsharded model (no collective), the same in every process."""
    seqs = [encode_conversation(engine, conv) for conv in conversations()]
    for s, adv in zip(seqs, ADVANTAGES):
        batch = collate(
            [s], pad_id=engine.pad_token_id, image_token_id=engine.image_token_id, device=device
        )
        with torch.no_grad():
            own = token_logprobs(
                model, batch, temperature=recipe.rollout.temperature, mask=batch["mask"]
            )[0]
        s.old_logprobs = [
            float(own[t]) + 0.1 * math.cos(t) if m else 0.0 for t, m in enumerate(s.mask)
        ]
        s.advantages = [adv] * len(s)
    return seqs


def full_gradients(backend: Backend) -> dict[str, torch.Tensor]:
    """Every parameter's gradient, unsharded, on CPU (zeros where a parameter has none);
    collective under FSDP2: every rank walks the same parameters in the same order."""
    grads = {}
    for name, p in backend.model.named_parameters():
        g = p.grad
        if g is None:
            grads[name] = torch.zeros(tuple(p.shape), dtype=torch.float32)
            continue
        if hasattr(g, "full_tensor"):
            g = g.full_tensor()
        grads[name] = g.detach().float().cpu().clone()
    return grads


def capturing_step(backend: Backend, real_step: Any, seen: dict[str, Any]) -> Any:
    """`backend.step` that first records the full gradients (what the optimiser would apply)."""

    def step(**kwargs: Any) -> float:
        seen["grads"] = full_gradients(backend)
        return float(real_step(**kwargs))

    return step


def sabotage_inplace_on_root_view(root: torch.nn.Module) -> None:
    """After FSDP2's `fully_shard`: the root returns `logits` as a view (a hook ahead of FSDP2's
    post-forward hook, which registers the pre-backward hook on it), and `logits.mul_(1.0)`
    follows (a hook after it: the first thing a caller could do with the output)."""

    def as_view(module: Any, args: Any, output: Any) -> Any:
        return type(output)(**{**output, "logits": output.logits.view_as(output.logits)})

    def in_place(module: Any, args: Any, output: Any) -> Any:
        if torch.is_grad_enabled():
            output.logits.mul_(1.0)
        return output

    root.register_forward_hook(as_view, prepend=True)
    root.register_forward_hook(in_place)


ROOT_VIEW_WARNING = r"FSDP2-wrapped module .* returned a view tensor"


def main(model_path: str, out: Path, reference: bool) -> None:
    warnings.filterwarnings("error", message=ROOT_VIEW_WARNING, category=UserWarning)
    torch.manual_seed(0)
    strategy = "none" if reference else "fsdp2"
    device = pick_device("cpu")
    first = recipe_for(model_path, out, AGGREGATIONS[0], strategy)
    rank, world = (0, 1) if reference else init_distributed(first.distributed, device)
    assert reference or world == 2, world
    from paravt.core.engines.hf import HFEngine

    model, processor = load_model_and_processor(first.model, device, dtype=torch.float32)
    engine = HFEngine(model, processor)
    seqs = build_sequences(model, engine, first, device)
    mine = seqs if reference else [seqs[i] for i in SHARDS[rank]]
    filler = None if reference else filler_sequence(engine)
    initial = {k: v.detach().clone() for k, v in model.state_dict().items()}
    backend: Backend | None = None
    sabotage = os.environ.get("PARAVT_GRAD_SABOTAGE", "")
    assert sabotage in ("", "inplace-view"), sabotage
    chosen = os.environ.get("PARAVT_GRAD_AGGREGATIONS")
    for aggregation in chosen.split(",") if chosen else AGGREGATIONS:
        recipe = recipe_for(model_path, out, aggregation, strategy)
        if backend is None:
            backend = Backend(model, recipe.distributed, recipe.optim, recipe.max_steps)
            if sabotage and not reference:
                sabotage_inplace_on_root_view(backend.model)
        else:  # the same initial weights for every aggregation
            backend.load_model_state(initial)
        seen: dict[str, dict[str, torch.Tensor]] = {}
        real_step = backend.step
        backend.step = capturing_step(backend, real_step, seen)  # type: ignore[method-assign]
        fresh = [
            Sequence_(s.token_ids, s.mask, s.media, s.old_logprobs, s.advantages) for s in mine
        ]
        metrics = rl.ppo_update(
            backend,
            None,
            fresh,
            recipe,
            pad_id=engine.pad_token_id,
            image_id=engine.image_token_id,
            device=device,
            filler=filler,
        )
        backend.step = real_step  # type: ignore[method-assign]
        tag = f"{aggregation}-{'reference' if reference else 'ranks'}"
        local = {
            "trained_tokens": sum(sum(s.mask) for s in mine),
            "sequences": len(mine),
            "micro_batches": metrics["micro_batches"],
            "normaliser": metrics["loss/normaliser"],
        }
        (out / f"{tag}-rank{rank}.json").write_text(json.dumps(local))
        if rank == 0:
            torch.save({"grads": seen["grads"], "metrics": metrics}, out / f"grads-{tag}.pt")
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    torch.set_num_threads(1)
    main(sys.argv[1], Path(sys.argv[2]), "--reference" in sys.argv[3:])
