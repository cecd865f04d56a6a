"""Reward callables with the exact signatures of TRL, verl, AReaL and OpenRLHF.

- TRL: `trl_reward_funcs(config)` -> callables `fn(prompts, completions, completion_ids, **kwargs)`.
- verl: `compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs)`.
- AReaL: `reward_fn(prompt, completions, prompt_ids, completion_ids, **data)`.
- OpenRLHF: `reward_func(queries, prompts, labels, **kwargs)` (imports torch lazily).
Each module imports nothing of its framework; the functions are plain Python.
"""

from paravt.rewards.integrations.areal import make_areal_reward_fn, reward_fn
from paravt.rewards.integrations.common import Sample, completion_text, sample_from
from paravt.rewards.integrations.openrlhf import make_openrlhf_reward_func, reward_func
from paravt.rewards.integrations.trl import trl_reward_funcs, trl_reward_weights
from paravt.rewards.integrations.verl import compute_score

__all__ = [
    "Sample",
    "completion_text",
    "compute_score",
    "make_areal_reward_fn",
    "make_openrlhf_reward_func",
    "reward_fn",
    "reward_func",
    "sample_from",
    "trl_reward_funcs",
    "trl_reward_weights",
]
