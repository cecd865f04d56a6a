"""Run by test_server_rehearsal.py under torchrun: RL steps whose rollouts go to an SGLang-API
server (`python -m paravt.core.fake_sglang`), weights pushed from rank 0 after every step.

usage: torchrun --nproc_per_node 2 server_rehearsal_driver.py MODEL OUT URL STEPS [OVERRIDE ...]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import torch
from rl_helpers import TWO_CALLS, examples

from paravt.train.recipe import load_recipe
from paravt.train.rl import train_rl


class AlternateScripted:
    """Scripts every other first main turn (TWO_CALLS, in request order) so groups hold a rollout
    that calls the tool (its sub-agents run on the server) and one that does not; forwards the
    server engine's `continuous_batching`, so the runtime sends requests one by one."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.continuous_batching = getattr(engine, "continuous_batching", False)
        self.first_turns = 0

    def encode_prompt(self, messages: Any, *, assistant_prefix: str = "") -> Any:
        return self.engine.encode_prompt(messages, assistant_prefix=assistant_prefix)

    def encode_continuation(
        self, messages: Any, *, previous: Any, assistant_prefix: str = ""
    ) -> Any:
        return self.engine.encode_continuation(
            messages, previous=previous, assistant_prefix=assistant_prefix
        )

    async def generate(self, trajectories: Any, sampling: Any) -> list[Any]:
        results: dict[int, Any] = {}
        real = []
        for i, t in enumerate(trajectories):
            if t.role == "main" and not any(m.role == "assistant" for m in t.messages):
                self.first_turns += 1
                if self.first_turns % 2 == 1:
                    results[i] = self.engine.encode_generation(TWO_CALLS)
                    continue
            real.append(i)
        if real:
            outs = await self.engine.generate([trajectories[i] for i in real], sampling)
            results.update(zip(real, outs))
        return [results[i] for i in range(len(trajectories))]


if __name__ == "__main__":
    torch.set_num_threads(1)
    model, out, url, steps = sys.argv[1], Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    extra = sys.argv[5:]  # recipe overrides after the defaults below
    recipe = load_recipe(
        "tiny_paragrpo",
        [
            f"model.path={model}",
            f"output_dir={out}",
            "distributed.strategy=fsdp2",
            "rollout.engine=sglang_server",
            f"rollout.server.urls=[{url}]",
            "rollout.server.retries=2",
            "rollout.server.backoff_s=0.2",
            "rollout.server.timeout_s=60",
            "rollout.server.verify_sync=true",
            "rollout.server.colocate=true",
            "rollout.batch_prompts=2",
            "rollout.group_size=2",
            "rollout.max_new_tokens=12",
            "rollout.subagent_max_new_tokens=8",
            "rollout.max_turns=2",
            "gating.choices=[2,4]",
            "optim.lr=1e-3",
            f"max_steps={steps}",
            "checkpoint.every_steps=1",
            f"checkpoint.keep_last={steps}",
            "checkpoint.save_final=false",
            "logging.progress=false",
            *extra,
        ],
    )
    exs, frames = examples()
    train_rl(recipe, examples=exs, frames=frames, wrap_engine=AlternateScripted)
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
