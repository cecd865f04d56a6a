"""verl: one `compute_score` for the reward loop and every legacy reward manager (tested: 0.9.1).

Load it with `reward.custom_reward_function.path=pkg://paravt.rewards.integrations.verl` (verl
imports the module by name, so the function pickles into process pools). Calling conventions it
answers, all of verl 0.9.1's managers that take a custom `compute_score`:

- reward loop `naive` / `dapo` and legacy `naive` / `dapo`: keywords
  `compute_score(data_source=, solution_str=, ground_truth=, extra_info=)` -> a `VerlScore` dict
  (`"score"` is the reward; every other key is logged by verl as an extra metric);
- legacy `batch`: `compute_score(data_sources=, solution_strs=, ground_truths=, extra_infos=)` ->
  one `VerlScore` per response;
- legacy `prime`: positional `compute_score(data_source, solution_str, ground_truth, extra_info)`
  in a process pool, reading a non-number result as `result[0]`: a `VerlScore` answers index 0
  with the reward (prime keeps no extra metrics).

Options from `reward.custom_reward_function.reward_kwargs` arrive as keywords: `preset` (paragrpo,
vanilla) or `config` (a dict of `RewardConfig` fields). Newer keywords (`step`, `tokenizer`,
`reward_router_address`, ...) are accepted and ignored.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from typing import Any

from paravt.rewards.config import RewardConfig
from paravt.rewards.integrations.common import (
    check_framework_version,
    require_sequence_anchoring,
    resolve_config,
    score_row,
)
from paravt.rewards.score import RewardBreakdown

__all__ = ["VerlScore", "compute_score", "verl_score"]
_MODULE = "paravt.rewards.integrations.verl"


class VerlScore(dict[str, float]):
    """verl's reward dict: `"score"` plus extra metrics, all floats.

    Index 0 reads the reward too, because verl's `prime` manager takes `float(result[0])` of any
    result that is not a number (without it every prime score would silently be 0)."""

    def __getitem__(self, key: Any) -> Any:
        if key == 0 and type(key) is int:
            return dict.__getitem__(self, "score")
        return dict.__getitem__(self, key)


def verl_score(r: RewardBreakdown) -> VerlScore:
    """A `RewardBreakdown` as verl's reward dict (also what the ParaVT agent loop of
    paravt-train reports as `reward_extra_info`)."""
    return VerlScore(
        score=r.total,
        acc=r.accuracy,
        format=r.format,
        base_format=r.base_format,
        anchor=r.anchor,
        tool=r.tool,
        penalty=r.penalty,
        degenerate=float(r.degenerate is not None),
        judge_unavailable=float(r.judge == "unavailable"),
    )


def _score_one(
    cfg: RewardConfig, solution_str: Any, ground_truth: Any, extra_info: Any
) -> VerlScore:
    r = score_row(cfg, solution_str, {"answer": ground_truth, "extra_info": extra_info})
    return verl_score(r)


def compute_score(
    data_source: Any = None,
    solution_str: Any = None,
    ground_truth: Any = None,
    extra_info: Any = None,
    *,
    data_sources: Sequence[Any] | None = None,
    solution_strs: Sequence[Any] | None = None,
    ground_truths: Sequence[Any] | None = None,
    extra_infos: Sequence[Any] | None = None,
    config: RewardConfig | Mapping[str, Any] | None = None,
    preset: str = "paragrpo",
    **kwargs: Any,
) -> VerlScore | list[VerlScore]:
    """Score one decoded response, or (legacy `batch` manager) a batch of them.

    Returns `VerlScore({"score": total, "acc", "format", "base_format", "anchor", "tool",
    "penalty", "degenerate", "judge_unavailable"})`, or a list of them when called with
    `solution_strs=`. The question type and options are read from `extra_info` (a dict or a JSON
    string) or from a dict ground truth.
    """
    check_framework_version("verl")
    cfg = resolve_config(config if config is not None else preset)
    require_sequence_anchoring(cfg, "verl")
    if solution_strs is not None:
        n = len(solution_strs)
        truths = list(ground_truths) if ground_truths is not None else [None] * n
        extras = list(extra_infos) if extra_infos is not None else [None] * n
        if len(truths) != n or len(extras) != n:
            raise ValueError(
                f"compute_score: {n} solution_strs but {len(truths)} ground_truths and "
                f"{len(extras)} extra_infos; pass one of each per response"
            )
        return [_score_one(cfg, s, t, e) for s, t, e in zip(solution_strs, truths, extras)]
    if solution_str is None:
        raise TypeError(
            "compute_score needs solution_str= (one response) or solution_strs= (a batch, as "
            "verl's batch reward manager passes)"
        )
    return _score_one(cfg, solution_str, ground_truth, extra_info)


if __name__ != _MODULE:
    # Loaded from its file path (`custom_reward_function.path=/.../verl.py`): verl then runs this
    # file as a module of another name, whose functions cannot be pickled into the process pools
    # of the prime manager. Hand out the objects of the importable module instead.
    globals().update({name: getattr(importlib.import_module(_MODULE), name) for name in __all__})
