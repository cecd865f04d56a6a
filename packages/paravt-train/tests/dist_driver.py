"""Run by test_distributed.py: two SFT steps and two RL steps with a distributed strategy.

usage: [torchrun --nproc_per_node 2] python dist_driver.py MODEL OUT STRATEGY
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import torch
from rl_helpers import EveryOtherScripted, examples

from conftest import tool_conversation
from paravt.train.recipe import load_recipe
from paravt.train.rl import train_rl
from paravt.train.sft import train_sft

if __name__ == "__main__":
    torch.set_num_threads(1)
    model, out, strategy = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    common = [
        f"distributed.strategy={strategy}",
        "distributed.zero_stage=2",
        "logging.progress=false",
        "max_steps=2",
        "checkpoint.every_steps=2",
    ]
    sft = load_recipe(
        "tiny_sft",
        [
            f"model.path={model}",
            "model.build_tiny=false",
            f"output_dir={out / 'sft'}",
            "sft.batch_size=2",
            *common,
        ],
    )
    convs = [tool_conversation("red", (255, 0, 0)), tool_conversation("blue", (0, 0, 255))]
    sft_final = train_sft(sft, conversations=convs)
    rl = load_recipe(
        "tiny_paragrpo",
        [
            f"model.path={sft_final}",
            f"output_dir={out / 'rl'}",
            "rollout.batch_prompts=2",
            "rollout.group_size=2",
            "rollout.max_new_tokens=12",
            "rollout.subagent_max_new_tokens=8",
            "rollout.max_turns=2",
            "gating.choices=[2,4]",
            *common,
        ],
    )
    exs, frames = examples()
    train_rl(rl, examples=exs, frames=frames, wrap_engine=EveryOtherScripted)
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
