"""Reward callables with the exact signatures of TRL, verl, AReaL and OpenRLHF.

- TRL: `trl_reward_funcs(config)` -> callables `fn(prompts, completions, completion_ids, **kwargs)`.
- verl: `compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs)` (also
  the batch manager's `solution_strs=` form and the prime manager's `result[0]`).
- AReaL: `reward_fn(prompt, completions, prompt_ids, completion_ids, **data)`, a picklable
  `ArealReward` instance.
- OpenRLHF: `reward_func(queries, prompts, labels, **kwargs)`, or
  `make_openrlhf_agent_executor(config)` for `--train.agent_func_path`.
Each module imports nothing of its framework at import time; the tested framework versions are
`TESTED_VERSIONS`, and an adapter warns once (`FrameworkVersionWarning`) outside them.
"""

from paravt.rewards.integrations.areal import (
    ArealReward,
    make_areal_reward_fn,
    reward_fn,
    vanilla_reward_fn,
)
from paravt.rewards.integrations.common import (
    TESTED_VERSIONS,
    Completion,
    FrameworkVersionWarning,
    Sample,
    check_framework_version,
    completion_text,
    resolve_config,
    row_field,
    sample_from,
    split_completion,
)
from paravt.rewards.integrations.openrlhf import (
    make_openrlhf_agent_executor,
    make_openrlhf_reward_func,
    reward_func,
)
from paravt.rewards.integrations.trl import trl_reward_funcs, trl_reward_weights
from paravt.rewards.integrations.verl import VerlScore, compute_score, verl_score

__all__ = [
    "TESTED_VERSIONS",
    "ArealReward",
    "Completion",
    "FrameworkVersionWarning",
    "Sample",
    "VerlScore",
    "check_framework_version",
    "completion_text",
    "compute_score",
    "make_areal_reward_fn",
    "make_openrlhf_agent_executor",
    "make_openrlhf_reward_func",
    "resolve_config",
    "reward_fn",
    "reward_func",
    "row_field",
    "sample_from",
    "split_completion",
    "trl_reward_funcs",
    "trl_reward_weights",
    "vanilla_reward_fn",
    "verl_score",
]
