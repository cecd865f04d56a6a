"""A real TRL GRPOTrainer runs two steps on the tiny Qwen3-VL (images, CPU) with our rewards."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import pytest

from paravt.rewards import RewardConfig, score
from paravt.rewards.integrations import trl_reward_funcs, trl_reward_weights


@pytest.fixture(scope="session")
def tiny_model_path() -> Path:
    """The tiny Qwen3-VL (seed 0), built once into $PARAVT_CACHE_DIR or ~/.cache/paravt."""
    from paravt.core.testing import cached_tiny_qwen3vl

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return cached_tiny_qwen3vl(seed=0)


def test_the_installed_trl_is_the_tested_version_named_in_the_readme() -> None:
    """TRL runs in the tests venv (the other frameworks in `nox -s integrations`)."""
    import importlib.metadata
    import re

    from paravt.rewards.integrations import TESTED_VERSIONS

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    stated = re.search(r"tested with trl ([0-9][0-9.]*[0-9])", readme)
    assert stated is not None
    assert importlib.metadata.version("trl") == stated.group(1) == TESTED_VERSIONS["trl"][1]


@pytest.mark.slow
def test_the_readme_trl_recipe_builds_a_grpo_trainer_with_our_reward(
    tiny_model_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's TRL block, executed as written; only GRPOConfig gets CPU settings."""
    import functools
    import re

    import trl
    from datasets import Dataset
    from transformers import AutoModelForImageTextToText

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    block = re.search(r"<!-- recipe: trl -->\s*```python\n(.*?)```", readme, re.S)
    assert block is not None
    cpu = functools.partial(trl.GRPOConfig, use_cpu=True, bf16=False, report_to="none")
    monkeypatch.setattr(trl, "GRPOConfig", cpu)
    monkeypatch.chdir(tmp_path)
    rows = [{"prompt": "Which option? A. red B. blue", "answer": "B", "question_type": "mcq"}] * 2
    namespace = {
        "model": AutoModelForImageTextToText.from_pretrained(tiny_model_path),
        "dataset": Dataset.from_list(rows),
    }
    exec(compile(block.group(1), "README.md (trl recipe)", "exec"), namespace)
    funcs = namespace["trainer"].reward_funcs
    assert [f.__name__ for f in funcs] == ["paravt_reward"]
    completion = "<answer>C</answer>"
    out = funcs[0](prompts=["q"], completions=[completion], answer=["B"], question_type=["mcq"])
    assert out == [score(completion, "B", "mcq").total]


@pytest.mark.slow
def test_trl_grpo_trainer_trains_two_steps_on_the_tiny_qwen3vl_with_paravt_rewards(
    tiny_model_path: Path, tmp_path: Path
) -> None:
    from datasets import Dataset
    from PIL import Image
    from transformers import AutoModelForImageTextToText, AutoProcessor
    from trl import GRPOConfig, GRPOTrainer

    # The random model writes no tags; the think prefix (as if appended to the prompt) gives
    # every completion a closed substantive think, and the released format rule ("tags": the
    # presets pay only a structure that parses, which a random model never writes) pays it, so
    # the logged format mean is checked against a non-zero value.
    config = RewardConfig.paragrpo(
        completion_prefix="<think>\nThe frames show a square.</think>", format_credit="tags"
    )
    seen: list[tuple[list[Any], dict[str, Any]]] = []

    def spy(prompts: list[Any], completions: list[Any], completion_ids: Any, **kwargs: Any):
        seen.append((completions, kwargs))
        return [0.0] * len(completions)

    rows = [
        {
            "prompt": [
                {
                    "role": "user",
                    "content": [
                        {"type": "image"},
                        {"type": "text", "text": "Which colour is the square? A. red B. blue"},
                    ],
                }
            ],
            "image": Image.new("RGB", (64, 64), (200, 0, 0) if i % 2 else (0, 0, 200)),
            "answer": "A" if i % 2 else "B",
            "question_type": "mcq",
        }
        for i in range(4)
    ]
    funcs = trl_reward_funcs(config, components=True)
    (total,) = trl_reward_funcs(config)
    args = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=2,
        num_generations=2,
        max_completion_length=16,
        max_steps=2,
        use_cpu=True,
        bf16=False,
        report_to="none",
        logging_steps=1,
        save_strategy="no",
        reward_weights=[*trl_reward_weights(config), 0.0, 0.0],
        seed=0,
    )
    trainer = GRPOTrainer(
        model=AutoModelForImageTextToText.from_pretrained(tiny_model_path),
        reward_funcs=[*funcs, total, spy],
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=AutoProcessor.from_pretrained(tiny_model_path),
    )
    trainer.train()

    assert trainer.state.global_step == 2
    steps = [h for h in trainer.state.log_history if "rewards/paravt_format/mean" in h]
    assert len(steps) == 2 and len(seen) == 2
    for logged, (completions, kwargs) in zip(steps, seen):
        # TRL passed chat-format completions and the dataset columns as lists
        assert isinstance(completions[0], list) and completions[0][0]["role"] == "assistant"
        assert kwargs["question_type"] == ["mcq", "mcq"]
        ours = [
            score(c[0]["content"], a, "mcq", config) for c, a in zip(completions, kwargs["answer"])
        ]
        fmt = sum(r.format for r in ours) / len(ours)
        assert fmt > 0
        assert float(logged["rewards/paravt_format/mean"]) == pytest.approx(fmt, abs=1e-3)
        acc = sum(r.accuracy for r in ours) / len(ours)
        assert float(logged["rewards/paravt_accuracy/mean"]) == pytest.approx(acc, abs=1e-3)
        assert math.isfinite(float(logged["loss"]))
        assert "paravt/reward/total" in logged  # the total function's log_metric output
