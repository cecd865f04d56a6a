"""RL step throughput on the tiny Qwen3-VL: our PARA-GRPO step next to TRL's GRPOTrainer.

Both trainers run in this process, on the same tiny random Qwen3-VL (built offline, seed 0), the
same prompts (a system message, one 64x64 image with its timestamp, a colour question), the same
batch (B prompts x G rollouts), temperature, completion budget, reward functions (paravt-rewards'
PARA-GRPO preset; TRL gets them through `paravt.rewards.integrations.trl_reward_funcs`), PPO clip
0.2, no KL term (TRL's default beta=0, so no reference model on either side), one optimiser step
per batch, token-mean loss (TRL's `dapo`), no gradient checkpointing on either side. Our step runs through the agent runtime with
`max_turns=1` (one generation, tools never run: a call in the last turn is recorded, not
executed), no think prefix and no nFrames gating, so it does what TRL's step does.

A step = generate B*G completions + score them + one forward/backward + optimiser step. Throughput
is generated (completion) tokens per second of step wall time; the first step of each trainer is a
warm-up and not counted. The two trainers alternate (ours, TRL, ours, TRL) so that load from other
processes on the machine hits both. Writes bench/results/train.json and prints a table.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

RESULTS = Path(__file__).parent / "results" / "train.json"
PROMPTS = 2  # B
GROUP = 4  # G
MAX_NEW_TOKENS = 96
TEMPERATURE = 0.7
LR = 1e-5
STEPS = 4  # per repetition; the first of each trainer is a warm-up
REPEATS = 2
SYSTEM = "You are a video assistant. Think, then answer inside <answer> </answer>."
QUESTION = "What colour is the square? Answer with one word."
INTRO = "The video is 20.0 seconds long. Overview (1 frames):"
COLOURS = {
    "red": (220, 30, 30),
    "green": (30, 190, 50),
    "blue": (30, 70, 230),
    "yellow": (235, 215, 30),
}


def frame_array(colour: str) -> np.ndarray:
    img = np.full((64, 64, 3), 120, dtype=np.uint8)
    img[12:52, 12:52] = COLOURS[colour]
    return img


# ------------------------------------------------------------------------------------------------
# Ours: paravt.train.rl.train_rl with in-memory examples and a one-frame overview


@dataclass
class Example:
    key: str
    answer: str
    video: Path
    question: str = QUESTION
    question_type: str = "oe"
    system: str | None = SYSTEM
    extra_info: dict[str, Any] = field(default_factory=dict)


class NoTools:
    async def execute(self, calls: Sequence[Any]) -> list[Any]:
        raise AssertionError("max_turns=1: tools never run in this benchmark")


class OneFrame:
    def overview(self, video: Any, k: int) -> tuple[list[Any], float]:
        from paravt.core.protocol import Frame

        return [Frame(frame_array(Path(video).stem), 0.0)], 20.0

    def toolbox(self, video: Any) -> NoTools:
        return NoTools()


def run_ours(model: Path, out: Path, steps: int) -> list[dict[str, float]]:
    from paravt.train.recipe import load_recipe
    from paravt.train.rl import train_rl

    recipe = load_recipe(
        "tiny_paragrpo",
        [
            f"model.path={model}",
            f"output_dir={out}",
            f"max_steps={steps}",
            f"rollout.batch_prompts={PROMPTS}",
            f"rollout.group_size={GROUP}",
            f"rollout.max_new_tokens={MAX_NEW_TOKENS}",
            f"rollout.temperature={TEMPERATURE}",
            "rollout.max_turns=1",
            "rollout.think_prefix=false",
            "gating.enabled=false",
            "video.overview_frames=1",
            "loss.kl_coef=0",
            "loss.aggregation=token-mean",
            f"loss.micro_batch_size={PROMPTS * GROUP}",
            f"optim.lr={LR}",
            "checkpoint.every_steps=0",
            "checkpoint.save_final=false",
            "logging.progress=false",
        ],
    )
    examples = [Example(f"ex-{c}", c, Path(f"{c}.mp4")) for c in COLOURS]
    train_rl(recipe, examples=examples, frames=OneFrame())
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    return [
        {
            "step_s": r["time/step_s"],
            "completion_tokens": r["tokens/generated"],
            "prompt_tokens": (r["len/main_total"] - r["len/main_generated"]),
            "rollout_s": r["time/rollout_s"],
            "update_s": r["time/update_s"] + r["time/reward_s"],
        }
        for r in rows
    ]


# ------------------------------------------------------------------------------------------------
# TRL: GRPOTrainer on the same model, prompts and rewards


def trl_rows() -> list[dict[str, Any]]:
    from PIL import Image

    return [
        {
            "prompt": [
                {"role": "system", "content": [{"type": "text", "text": SYSTEM}]},
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": INTRO},
                        {"type": "text", "text": "<0.0 seconds>"},
                        {"type": "image"},
                        {"type": "text", "text": "Question: " + QUESTION},
                    ],
                },
            ],
            "image": Image.fromarray(frame_array(c)),
            "answer": c,
            "question_type": "oe",
        }
        for c in COLOURS
    ]


def run_trl(model: Path, out: Path, steps: int) -> list[dict[str, float]]:
    from datasets import Dataset
    from transformers import AutoModelForImageTextToText, AutoProcessor, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from paravt.rewards import RewardConfig
    from paravt.rewards.integrations import trl_reward_funcs

    times: list[float] = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.t0 = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            times.append(time.perf_counter() - self.t0)

    args = GRPOConfig(
        output_dir=str(out),
        per_device_train_batch_size=PROMPTS * GROUP,
        gradient_accumulation_steps=1,
        num_generations=GROUP,
        max_completion_length=MAX_NEW_TOKENS,
        temperature=TEMPERATURE,
        learning_rate=LR,
        lr_scheduler_type="constant",
        warmup_steps=0,
        beta=0.0,
        gradient_checkpointing=False,  # TRL defaults to True; ours (tiny recipes) does not use it
        epsilon=0.2,
        loss_type="dapo",
        max_steps=steps,
        use_cpu=True,
        bf16=False,
        report_to="none",
        logging_steps=1,
        save_strategy="no",
        seed=0,
        disable_tqdm=True,
    )
    trainer = GRPOTrainer(
        model=AutoModelForImageTextToText.from_pretrained(model),
        reward_funcs=trl_reward_funcs(RewardConfig.paragrpo()),
        args=args,
        train_dataset=Dataset.from_list(trl_rows()),
        processing_class=AutoProcessor.from_pretrained(model),
        callbacks=[StepTimer()],
    )
    trainer.train()
    logs = [h for h in trainer.state.log_history if "completions/mean_length" in h]
    if len(logs) != len(times):
        raise RuntimeError(f"TRL logged {len(logs)} steps but {len(times)} were timed")
    return [
        {"step_s": t, "completion_tokens": float(h["completions/mean_length"]) * PROMPTS * GROUP}
        for t, h in zip(times, logs)
    ]


def trl_prompt_tokens(model: Path) -> int:
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(model)
    row = trl_rows()[0]
    messages = [row["prompt"][0], row["prompt"][1]]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    enc = processor(text=[text], images=[row["image"]], return_tensors="pt")
    return int(enc["input_ids"].shape[1])


# ------------------------------------------------------------------------------------------------


def summarise(steps: list[dict[str, float]]) -> dict[str, float]:
    tokens = sum(s["completion_tokens"] for s in steps)
    seconds = sum(s["step_s"] for s in steps)
    return {
        "steps": len(steps),
        "completion_tokens": tokens,
        "seconds": seconds,
        "tokens_per_s": tokens / seconds,
        "median_step_s": statistics.median(s["step_s"] for s in steps),
        "mean_completion_tokens_per_rollout": tokens / (len(steps) * PROMPTS * GROUP),
    }


def main() -> None:
    import torch
    import transformers
    import trl

    from paravt.core.testing import cached_tiny_qwen3vl

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    logging.disable(logging.WARNING)
    transformers.logging.set_verbosity_error()
    cache = Path(os.environ.get("PARAVT_CACHE_DIR", Path(tempfile.gettempdir()) / "paravt-bench"))
    model = cached_tiny_qwen3vl(seed=0, cache_dir=cache)
    ours: list[dict[str, float]] = []
    theirs: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(REPEATS):
            torch.manual_seed(rep)
            ours += run_ours(model, Path(tmp) / f"ours-{rep}", STEPS)[1:]
            theirs += run_trl(model, Path(tmp) / f"trl-{rep}", STEPS)[1:]
    a, b = summarise(ours), summarise(theirs)
    a["prompt_tokens"] = statistics.mean(s["prompt_tokens"] for s in ours)
    a["rollout_share"] = sum(s["rollout_s"] for s in ours) / a["seconds"]
    b["prompt_tokens"] = trl_prompt_tokens(model)
    ratio = a["tokens_per_s"] / b["tokens_per_s"]
    result = {
        "what": (
            "RL step throughput (generated tokens per second of step wall time) of paravt-train's "
            "PARA-GRPO step (agent runtime, max_turns=1, no tools, no think prefix, no gating) and "
            "of TRL's GRPOTrainer, same tiny Qwen3-VL, prompts, batch, group size, temperature, "
            "completion budget, paravt-rewards reward functions, clip 0.2, no KL, one optimiser "
            "step per batch, token-mean loss; both in this process, alternating, warm-up steps "
            "dropped. A step = generation + reward + forward/backward + optimiser step."
        ),
        "setup": {
            "model": "tiny random Qwen3-VL (paravt.core.tiny, seed 0, ~1 M parameters)",
            "prompts_per_step": PROMPTS,
            "group_size": GROUP,
            "max_new_tokens": MAX_NEW_TOKENS,
            "temperature": TEMPERATURE,
            "image": "one 64x64 frame per prompt",
            "measured_steps_per_trainer": a["steps"],
            "torch_threads": torch.get_num_threads(),
            "versions": {
                "torch": torch.__version__,
                "transformers": transformers.__version__,
                "trl": trl.__version__,
            },
            "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
            "load_average_at_end": list(os.getloadavg()),
        },
        "paravt_train": a,
        "trl_grpo_trainer": b,
        "ratio_paravt_over_trl": ratio,
        "note": (
            "Completions of a random model rarely stop early, so both sides generate close to "
            "max_new_tokens; tokens/s counts what each actually generated. The machine is shared, "
            "so absolute numbers move with its load; the ratio is the figure to read."
        ),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")

    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"RL step on the tiny Qwen3-VL: {PROMPTS} prompts x {GROUP} rollouts, {MAX_NEW_TOKENS} new tokens"
    )
    for col in (
        "trainer",
        "steps",
        "median step s",
        "completion tok/rollout",
        "prompt tok",
        "tokens/s",
    ):
        table.add_column(col, justify="right")
    for name, r in (("paravt-train", a), (f"TRL {trl.__version__} GRPOTrainer", b)):
        table.add_row(
            name,
            str(r["steps"]),
            f"{r['median_step_s']:.2f}",
            f"{r['mean_completion_tokens_per_rollout']:.1f}",
            f"{r['prompt_tokens']:.0f}",
            f"{r['tokens_per_s']:.0f}",
        )
    Console().print(table)
    print(f"ratio paravt-train / TRL: {ratio:.2f}x  ->  {RESULTS}")


if __name__ == "__main__":
    main()
