"""One RL step's metrics row (`step_metrics`, averaged over ranks), the phase times it reads
(`StepTimes`) and the progress bar's numbers (`progress_bar`)."""

from __future__ import annotations

import math
from typing import NamedTuple

from paravt.train.process_group import all_reduce_mean
from paravt.train.rl.rollouts import Rollouts
from paravt.train.rl.scoring import episode_metrics, zero_groups_frac


def progress_bar(metrics: dict[str, float]) -> dict[str, float]:
    """The progress bar's numbers: f_tau (the run's own format reward) beside the measures it
    cannot fool, format_ok (share of episodes whose blocks all parse) and invalid tool calls per
    episode, then kappa."""
    return {
        "reward": metrics["reward/total"],
        "f_tau": metrics["f_tau"],
        "format_ok": metrics.get("format_ok", math.nan),
        "invalid/ep": metrics.get("tool/invalid_calls", math.nan),
        "kappa": metrics["kappa"],
    }


class StepTimes(NamedTuple):
    """`time.perf_counter()` at the start of a step and after each of its phases."""

    start: float
    rolled_out: float
    scored: float
    updated: float


def step_metrics(
    rollouts: Rollouts,
    group_size: int,
    *,
    update_metrics: dict[str, float],
    sync_metrics: dict[str, float],
    engine_metrics: dict[str, float],
    times: StepTimes,
    producer_metrics: dict[str, float],
) -> dict[str, float]:
    """The step's metrics row, averaged over ranks (collective: the same keys on every rank):
    the episodes' (`episode_metrics`), the share of groups without signal and of episodes at the
    reward clip, the update's and the weight sync's, the phases' times, generated tokens and
    their throughput, the producer's (asynchronous runs) and the rollout engine's."""
    metrics = episode_metrics(rollouts)
    metrics["advantage/zero_groups_frac"] = zero_groups_frac(
        [r.total for r in rollouts.rewards], group_size
    )
    # the share of episodes whose shaped reward sat at advantage.reward_clip: what they earned
    # above it (R_tool, anchor parts) moved no advantage
    clipped = rollouts.at_clip
    metrics["advantage/at_clip_frac"] = sum(clipped) / len(clipped) if clipped else 0.0
    metrics |= update_metrics
    metrics |= sync_metrics
    generated = sum(s.num_generated for ep in rollouts.episodes for s in [ep.main, *ep.subagents])
    total = times.updated - times.start
    metrics |= {
        "time/rollout_s": times.rolled_out - times.start,
        "time/reward_s": times.scored - times.rolled_out,
        "time/update_s": times.updated - times.scored,
        "time/step_s": total,
        "tokens/generated": float(generated),
        "throughput/generated_tokens_per_s": generated / max(total, 1e-9),
        **producer_metrics,
    }
    metrics |= engine_metrics
    return all_reduce_mean(metrics)
