"""verl's own reward code calls `paravt.rewards.integrations.verl.compute_score`.

The config is composed by verl's Hydra config (`ppo_trainer.yaml`) with the README's overrides,
the function is loaded by verl's `get_custom_reward_fn`, and the scores come out of verl's
experimental reward loop (`RewardLoopManager` on ray and its `RewardLoopWorker`, what `main_ppo`
uses in 0.9.1) and of every legacy reward manager that takes a custom `compute_score` (naive,
dapo, batch, prime). Each must equal `paravt.rewards.score` on the same completions, extra
metrics included.
"""

from __future__ import annotations

import copy
import importlib.metadata
import shlex
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from shared import CASES, direct, readme_block, readme_tested_version, tokenizer_dir, verl_metrics

import paravt.rewards.integrations.verl as adapter
from paravt.rewards.integrations import TESTED_VERSIONS

PROMPT_LEN, RESPONSE_LEN = 24, 96


def readme_overrides() -> list[str]:
    """The Hydra overrides of the README's verl recipe (every `key=value` word after main_ppo)."""
    words = shlex.split(readme_block("verl").replace("\\\n", " "))
    assert words[:3] == ["python", "-m", "verl.trainer.main_ppo"], words[:3]
    return [w for w in words[3:] if "=" in w]


@pytest.fixture(scope="module")
def tokenizer_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tokenizer_dir(tmp_path_factory.mktemp("verl"))


def compose_config(tokenizer_path: Path, *extra: str) -> Any:
    """verl's trainer config with the README overrides, as `main_ppo` would build it."""
    import verl
    from hydra import compose, initialize_config_dir

    config_dir = Path(verl.__file__).parent / "trainer" / "config"
    overrides = [*readme_overrides(), f"actor_rollout_ref.model.path={tokenizer_path}", *extra]
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides)


def make_batch(tokenizer: Any, cases=CASES) -> Any:
    """A DataProto as verl's rollout leaves it: left-padded prompts, right-padded responses."""
    from verl import DataProto

    pad = tokenizer.pad_token_id
    prompts, responses, masks = [], [], []
    for case in cases:
        p = tokenizer(f"Which option? {case.answer}", add_special_tokens=False)["input_ids"]
        r = tokenizer(case.completion, add_special_tokens=False)["input_ids"]
        r = [*r, tokenizer.eos_token_id]
        assert len(p) <= PROMPT_LEN and len(r) <= RESPONSE_LEN
        prompts.append([pad] * (PROMPT_LEN - len(p)) + p)
        responses.append(r + [pad] * (RESPONSE_LEN - len(r)))
        masks.append(
            [0] * (PROMPT_LEN - len(p)) + [1] * (len(p) + len(r)) + [0] * (RESPONSE_LEN - len(r))
        )
    prompts_t, responses_t = torch.tensor(prompts), torch.tensor(responses)
    return DataProto.from_dict(
        tensors={
            "prompts": prompts_t,
            "responses": responses_t,
            "input_ids": torch.cat([prompts_t, responses_t], dim=1),
            "attention_mask": torch.tensor(masks),
        },
        non_tensors={
            "data_source": np.array(["paravt"] * len(cases), dtype=object),
            "reward_model": np.array(
                [{"ground_truth": c.answer, "style": "rule"} for c in cases], dtype=object
            ),
            "extra_info": np.array(
                [{"question_type": c.question_type, "index": i} for i, c in enumerate(cases)],
                dtype=object,
            ),
        },
    )


def last_token_rewards(reward_tensor: torch.Tensor, data: Any) -> list[float]:
    """The reward verl placed on each response's last valid token (and nothing elsewhere)."""
    lengths = data.batch["attention_mask"][:, PROMPT_LEN:].sum(dim=-1)
    out = []
    for i, n in enumerate(lengths.tolist()):
        row = reward_tensor[i]
        assert float(row.abs().sum() - row[n - 1].abs()) == 0.0
        out.append(float(row[n - 1]))
    return out


def assert_extra_info(extra: dict[str, list[Any]], preset: str) -> None:
    for i, case in enumerate(CASES):
        expected = verl_metrics(direct(case, preset))
        got = {k: float(extra[k][i]) for k in expected}
        assert got == pytest.approx(expected), (case.completion, got, expected)


def test_the_installed_verl_is_the_tested_version_named_in_the_readme() -> None:
    installed = importlib.metadata.version("verl")
    print(f"verl {installed}")
    assert installed == readme_tested_version("verl") == TESTED_VERSIONS["verl"][1]


def test_the_readme_overrides_load_our_function_through_verls_own_loader(
    tokenizer_path: Path,
) -> None:
    from verl.trainer.ppo.reward import get_custom_reward_fn

    config = compose_config(tokenizer_path)
    assert config.reward.custom_reward_function.path == "pkg://paravt.rewards.integrations.verl"
    fn = get_custom_reward_fn(config)
    assert fn.args[0] is adapter.compute_score  # partial(_call_with_kwargs, raw_fn, kwargs)


@pytest.mark.parametrize(
    ("manager", "preset"), [("naive", "paragrpo"), ("naive", "vanilla"), ("dapo", "paragrpo")]
)
def test_the_reward_loop_scores_equal_direct_scoring(
    tokenizer_path: Path, manager: str, preset: str
) -> None:
    from verl.experimental.reward_loop import RewardLoopWorker

    config = compose_config(
        tokenizer_path,
        f"reward.reward_manager.name={manager}",
        f"reward.custom_reward_function.reward_kwargs.preset={preset}",
    )
    worker = RewardLoopWorker(config)
    assert type(worker.reward_manager).__module__.endswith(f"reward_manager.{manager}")
    data = make_batch(worker.input_tokenizer)
    outputs = worker.loop.run_until_complete(worker.compute_score_batch(data))
    # what RewardLoopManager.compute_rm_score does with the workers' outputs
    rm_scores = type(worker.reward_manager).assemble_rm_scores(
        data, [o["reward_score"] for o in outputs]
    )
    expected = [direct(c, preset).total for c in CASES]
    assert last_token_rewards(rm_scores, data) == pytest.approx(expected)
    extra = {
        k: [o["reward_extra_info"][k] for o in outputs] for k in outputs[0]["reward_extra_info"]
    }
    assert_extra_info(extra, preset)


def test_main_ppos_reward_loop_manager_on_ray_scores_equal_direct_scoring(
    tokenizer_path: Path,
) -> None:
    """The path `main_ppo` takes: `RewardLoopManager` starts `RewardLoopWorker` ray actors, which
    load our function from the config in their own process, and gathers their scores."""
    import ray
    from verl.experimental.reward_loop import RewardLoopManager
    from verl.utils import hf_tokenizer

    config = compose_config(tokenizer_path, "reward.num_workers=1")
    data = make_batch(hf_tokenizer(str(tokenizer_path)))
    ray.init(num_cpus=1, include_dashboard=False)
    try:
        out = RewardLoopManager(config).compute_rm_score(data)
    finally:
        ray.shutdown()
    expected = [direct(c).total for c in CASES]
    assert last_token_rewards(out.batch["rm_scores"], data) == pytest.approx(expected)
    extra = {k: list(out.non_tensor_batch[k]) for k in out.meta_info["reward_extra_keys"]}
    assert_extra_info(extra, "paragrpo")


def legacy_manager(name: str, config: Any, tokenizer: Any) -> Any:
    """A legacy reward manager built the way verl's trainer built them before the reward loop:
    registry class, tokenizer, num_examine, the loaded custom function, reward_fn_key."""
    from verl.trainer.ppo.reward import get_custom_reward_fn
    from verl.workers.reward_manager import get_reward_manager_cls

    return get_reward_manager_cls(name)(
        tokenizer=tokenizer,
        num_examine=1,
        compute_score=get_custom_reward_fn(config),
        reward_fn_key="data_source",
    )


@pytest.mark.parametrize("name", ["naive", "dapo", "batch"])
def test_legacy_managers_score_equal_direct_scoring_with_every_extra_metric(
    tokenizer_path: Path, name: str
) -> None:
    from verl.utils import hf_tokenizer

    tokenizer = hf_tokenizer(str(tokenizer_path))
    manager = legacy_manager(name, compose_config(tokenizer_path), tokenizer)
    data = make_batch(tokenizer)
    out = manager(copy.deepcopy(data), return_dict=True)
    expected = [direct(c).total for c in CASES]
    assert last_token_rewards(out["reward_tensor"], data) == pytest.approx(expected)
    assert_extra_info(out["reward_extra_info"], "paragrpo")


@pytest.mark.parametrize("loaded_from", ["pkg", "file"])
def test_the_prime_manager_scores_in_its_process_pool_equal_direct_scoring(
    tokenizer_path: Path, loaded_from: str
) -> None:
    """prime pickles the function into a process pool and reads `float(result[0])` of a dict:
    both used to give a silent 0 for every response."""
    from verl.utils import hf_tokenizer

    path = adapter.__file__ if loaded_from == "file" else "pkg://paravt.rewards.integrations.verl"
    config = compose_config(tokenizer_path, f"reward.custom_reward_function.path={path}")
    tokenizer = hf_tokenizer(str(tokenizer_path))
    manager = legacy_manager("prime", config, tokenizer)
    data = make_batch(tokenizer)
    out = manager(data, return_dict=True)
    expected = [direct(c).total for c in CASES]
    assert expected[0] > 0
    assert last_token_rewards(out["reward_tensor"], data) == pytest.approx(expected)
    assert as_floats(data.batch["acc"]) == pytest.approx(expected)


def as_floats(t: torch.Tensor) -> list[float]:
    return [float(v) for v in t.tolist()]
