"""Run by test_resume.py in a subprocess: tiny SFT with a checkpoint every step.

usage: python resume_driver.py MODEL_PATH OUTPUT_DIR MAX_STEPS [--resume]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import torch

from conftest import tool_conversation
from paravt.train.recipe import load_recipe
from paravt.train.sft import train_sft

if __name__ == "__main__":
    torch.set_num_threads(1)
    model, out, steps = sys.argv[1], sys.argv[2], sys.argv[3]
    recipe = load_recipe(
        "tiny_sft",
        [
            f"model.path={model}",
            "model.build_tiny=false",
            f"output_dir={out}",
            f"max_steps={steps}",
            "sft.batch_size=2",
            "checkpoint.every_steps=1",
            "checkpoint.keep_last=2",
            "logging.progress=false",
        ],
    )
    convs = [
        tool_conversation(name, rgb)
        for name, rgb in [("red", (255, 0, 0)), ("blue", (0, 0, 255)), ("green", (0, 255, 0))]
    ]
    train_sft(recipe, resume="--resume" in sys.argv, conversations=convs)
