"""Run by test_server_rehearsal.py under torchrun: RL steps whose rollouts go to an SGLang-API
server (`python -m paravt.core.testing.stand_in`), weights pushed from rank 0 after every step.

usage: torchrun --nproc_per_node 2 server_rehearsal_driver.py MODEL OUT URL STEPS [OVERRIDE ...]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import torch
from rl_helpers import AlternateScripted, examples

from paravt.train.recipe import load_recipe
from paravt.train.rl import train_rl

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
            "optim.warmup_steps=0",  # every step moves the weights the server is pushed
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
