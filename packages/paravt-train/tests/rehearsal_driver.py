"""The CPU rehearsal of the 8-GPU trainers (run by test_distributed.py).

    torchrun --nproc_per_node 2 rehearsal_driver.py MODEL OUT        # 2 ranks on gloo: FSDP2
    (PARAVT_REHEARSAL_STRATEGY=deepspeed: ZeRO-2)
    python rehearsal_driver.py MODEL OUT --sft-reference              # 1 process, same SFT rows

Work differs per rank on purpose. SFT: 3 steps of 3 rows per rank, some rows longer than
sft.max_length (skipped), so ranks run 3/0, 1/2 and 3/2 micro-batches (rank 1 has no usable row
in step 1). RL: 3 steps with the 8B recipe's loss (decoupled, k1 KL in the reward, a sharded
reference); rank 0's rollouts call crop_video (sub-agents, trained: more micro-batches), rank 1's
never do. Every collective has a 60 s timeout, so a rank out of step fails instead of hanging.

After each step every rank writes OUT/<stage>-rank<R>.jsonl: a checksum of the full weights (and
of the rollout replica), its micro-batch count, and (RL) its rewards, advantages and trained-token
count; the test compares them across ranks and with one-process computations.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import torch
import torch.distributed as dist
from rl_helpers import TWO_CALLS, EveryOtherScripted, examples

from conftest import tool_conversation
from paravt.core.protocol import Message
from paravt.train.recipe import load_recipe
from paravt.train.rl import train_rl
from paravt.train.sft import train_sft

STRATEGY = os.environ.get("PARAVT_REHEARSAL_STRATEGY", "fsdp2")  # or deepspeed (ZeRO-2)
SFT_STEPS = 3
RL_STEPS = 3
ROWS_PER_RANK = 3  # sft.batch_size 1 x sft.grad_accum 3
MAX_LENGTH = 400
# rows in order (data.shuffle=false): step s takes 6 rows, rank 0 the first 3, rank 1 the next 3
PATTERN = ["SSS", "LLL", "SLL", "SSL", "SSS", "SLS"]  # S usable, L too long (skipped)
COMMON = [
    "logging.progress=false",
    "distributed.timeout_s=60",
    "optim.lr=1e-3",
    "optim.eps=1.0",  # Adam's step ~ lr * g: the weights show the gradient's scale
    "optim.max_grad_norm=0",  # no clipping: it would hide a wrongly scaled gradient
    "optim.weight_decay=0",
    "optim.schedule=constant",
]


def sft_rows() -> list[list[Message]]:
    colours = [("red", (255, 0, 0)), ("blue", (0, 0, 255)), ("green", (0, 255, 0))]
    rows = []
    for k, kind in enumerate("".join(PATTERN)):
        name, rgb = colours[k % 3]
        conv = tool_conversation(name, rgb)
        if kind == "L":  # a tool response long enough to pass sft.max_length
            conv[3] = Message("tool", f"[0.0 s - 5.0 s] a {name} square. " + "detail " * 400)
        rows.append(conv)
    return rows


def checksum(backend: Any) -> tuple[int, float]:
    """sha256 of the full weights (first 48 bits, exact as a float) and their sum; collective."""
    h = hashlib.sha256()
    total = 0.0
    for bucket in backend.iter_full_state(device="cpu"):
        for name, t in bucket:
            h.update(name.encode())
            h.update(t.float().contiguous().numpy().tobytes())
            total += float(t.double().sum())
    return int(h.hexdigest()[:12], 16), total


def replica_checksum(replica: Any) -> int:
    h = hashlib.sha256()
    for name, t in replica.state_dict().items():
        h.update(name.encode())
        h.update(t.float().contiguous().numpy().tobytes())
    return int(h.hexdigest()[:12], 16)


def write(out: Path, stage: str, row: dict[str, Any]) -> None:
    rank = dist.get_rank() if dist.is_initialized() else 0
    with open(out / f"{stage}-rank{rank}.jsonl", "a") as f:
        f.write(json.dumps(row) + "\n")


class RankScripted(EveryOtherScripted):
    """Rank 0: every other rollout's first turn calls crop_video twice (two sub-agents). Rank 1:
    every other rollout answers at once (no call, no sub-agent); the rest is the real model."""

    ANSWER = "The square is red.</think><answer>red</answer>"

    async def generate(self, trajectories: Any, sampling: Any) -> list[Any]:
        if dist.get_rank() == 0:
            return await super().generate(trajectories, sampling)
        first = [
            i
            for i, t in enumerate(trajectories)
            if t.role == "main" and not any(m.role == "assistant" for m in t.messages)
        ]
        script = {i for n, i in enumerate(first) if n % 2 == 0}
        real = [i for i in range(len(trajectories)) if i not in script]
        outs = await self.engine.generate([trajectories[i] for i in real], sampling) if real else []
        results: dict[int, Any] = dict(zip(real, outs))
        for i in script:
            results[i] = self.engine.encode_generation(self.ANSWER)
        return [results[i] for i in range(len(trajectories))]


assert TWO_CALLS  # rank 0's script (rl_helpers)


def run_sft(model: str, out: Path, *, reference: bool) -> None:
    accum = ROWS_PER_RANK * (2 if reference else 1)
    recipe = load_recipe(
        "tiny_sft",
        [
            f"model.path={model}",
            "model.build_tiny=false",
            f"output_dir={out / ('sft-reference' if reference else 'sft')}",
            f"distributed.strategy={'none' if reference else STRATEGY}",
            f"max_steps={SFT_STEPS}",
            "sft.batch_size=1",
            f"sft.grad_accum={accum}",
            "sft.packing=false",
            f"sft.max_length={MAX_LENGTH}",
            "sft.num_workers=1",
            "data.shuffle=false",
            "checkpoint.every_steps=2",
            *COMMON,
        ],
    )

    def on_step(step: int, backend: Any, metrics: dict[str, float]) -> None:
        digest, total = checksum(backend)
        write(
            out,
            "sft-reference" if reference else "sft",
            {
                "step": step,
                "checksum": digest,
                "weight_sum": total,
                "micro_batches": metrics["micro_batches"],
                "loss": metrics["loss"],
                "grad_norm": metrics["grad_norm"],
                "tokens": metrics["tokens/supervised"],
            },
        )

    train_sft(recipe, conversations=sft_rows(), on_step=on_step)


def run_rl(model: str, out: Path) -> None:
    recipe = load_recipe(
        "tiny_paragrpo",
        [
            f"model.path={model}",
            f"output_dir={out / 'rl'}",
            f"distributed.strategy={STRATEGY}",
            f"max_steps={RL_STEPS}",
            "rollout.batch_prompts=2",
            "rollout.group_size=2",
            "rollout.max_new_tokens=12",
            "rollout.subagent_max_new_tokens=8",
            "rollout.max_turns=2",
            "gating.choices=[2,4]",
            "loss.micro_batch_size=1",
            "loss.include_subagents_in_loss=true",
            "loss.kl_form=k1_reward",
            "loss.decoupled=true",
            "loss.ppo_mini_batches=2",  # two optimiser steps per RL step, over unequal ranks
            "checkpoint.every_steps=2",
            *COMMON,
        ],
    )

    def on_step(step: int, backend: Any, metrics: dict[str, float], ro: Any) -> None:
        digest, total = checksum(backend)
        trained = 0
        for ep in ro.episodes:
            trained += sum(ep.main.loss_mask)
            trained += sum(sum(s.loss_mask) for s in ep.subagents)
        write(
            out,
            "rl",
            {
                "step": step,
                "checksum": digest,
                "weight_sum": total,
                "replica_checksum": replica_checksum(_REPLICA[0]) if _REPLICA else None,
                "advantage_totals": list(ro.advantage_totals),
                "advantages": list(ro.advantages),
                "subagents": sum(len(ep.subagents) for ep in ro.episodes),
                "trained_tokens": trained,
                "normaliser": metrics["loss/normaliser"],
                "micro_batches_mean": metrics["micro_batches"],
                "grad_norm": metrics["grad_norm"],
                "optimizer_steps": metrics["optimizer_steps"],
            },
        )

    exs, frames = examples()
    train_rl(recipe, examples=exs, frames=frames, wrap_engine=_capture, on_step=on_step)


_REPLICA: list[Any] = []


def _capture(engine: Any) -> Any:
    """Keep the rollout engine's model (the FSDP2 replica) to checksum it after each step."""
    _REPLICA[:] = [engine.model]
    return RankScripted(engine)


if __name__ == "__main__":
    torch.set_num_threads(1)
    model_path, out_dir = sys.argv[1], Path(sys.argv[2])
    out_dir.mkdir(parents=True, exist_ok=True)
    if "--sft-reference" in sys.argv:
        run_sft(model_path, out_dir, reference=True)
    else:
        run_sft(model_path, out_dir, reference=False)
        run_rl(model_path, out_dir)
        if dist.is_initialized():
            dist.destroy_process_group()
