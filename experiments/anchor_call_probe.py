"""Why do the token-anchored arms of the `prior_kept` run drop the tool? (issue 45, a probe)

In the second pre-registered run every arm that anchors at token level (PARA-GRPO, anchoring
alone, and PARA-GRPO without R_tool or without gamma) went from about 1.4 calls per rollout to
about 0.4, while the same arm with the reference's sequence-level anchoring kept about 1.9.
Their training curves share two signs: the loss sits far below zero (about -1 to -2.3, where
the other arms hover around 0) and the generated length falls (about 66 -> 27 tokens), and the
arm without R_tool follows PARA-GRPO's curve almost exactly, as if R_tool carried no weight.

This probe takes `--batches` steps' worth of rollouts from a policy (the SFT policy of a seed, by
default: a probe of the cold start, never a verdict) under the token-anchored arm's recipe,
scores the same rollouts under both anchoring forms (`para_grpo` and `para_grpo_sequence`: they
differ in nothing else; with `--cold`, a learning-test cold start under the shipped tiny recipe),
and reads the per-token advantages the trainer would train on
(`paravt.train.rl.training_sequences`), twice: as the trainer computed them before
`paravt.rewards.anchor_fractions` (`before_clip_fractions`) and as it does now (`now`):

- the mean advantage per trained token (what the PPO loss is minus, at ratio 1);
- how many episodes' shaped rewards sat at the clip (right answers with and without a call);
- per group: the spread of its rewards, the scale from reward units to advantage units that
  token-level anchoring multiplies its parts by, its callers and accuracy;
- callers against non-callers: trained tokens, their share of the step's advantage mass (their
  pull on the gradient under token-mean aggregation), and the advantage on the token that
  decides (the first token after the first `</think>`: `<tool_call>` or `<answer>`);
- the largest |advantage| on any trained token.

    python experiments/anchor_call_probe.py --run DIR/reproduce --seed 0 \
        --out experiments/results/anchor_call_probe/prior_kept_s0.json
    python experiments/anchor_call_probe.py --run DIR/reproduce --seed 0 \
        --set advantage.reward_clip=40 --out experiments/results/anchor_call_probe/prior_kept_s0_clip40.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path
from typing import Any

ARMS = ("para_grpo", "para_grpo_sequence")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--run", type=Path, help="a `paravt-eval reproduce --out` folder")
    where.add_argument(
        "--cold",
        type=Path,
        help="a miniature cold start's folder (`paravt.train.miniature.cold_start`, as the "
        "learning test and experiments/evidence_credit.py make it): its SFT policy under the "
        "shipped tiny recipe",
    )
    parser.add_argument("--seed", type=int, default=0, help="the run's seed whose policy to probe")
    parser.add_argument(
        "--policy",
        default="sft",
        help="which of the seed's runs to probe: sft (default) or an arm's name (its final/)",
    )
    parser.add_argument("--task", default="prior_kept", help="the run's task (default prior_kept)")
    parser.add_argument("--batches", type=int, default=2, help="steps' worth of prompts to draw")
    parser.add_argument(
        "--set",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="recipe overrides for every arm (a probe of a setting, e.g. advantage.reward_clip=40)",
    )
    parser.add_argument("--out", type=Path, default=None, help="write the numbers as JSON here")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import torch

    from paravt.core.engines import HFEngine
    from paravt.train import miniature as m
    from paravt.train.frames import FrameSource
    from paravt.train.modeling import load_model_and_processor, pick_device
    from paravt.train.rl import (
        build_gate,
        load_rl_examples,
        rollout,
    )

    torch.set_num_threads(1)
    if args.cold is not None:  # a miniature cold start: the learning test's task, as shipped
        data = m.make_task_data(args.cold, seed_offset=args.seed)
        policy = args.cold / "sft" / "final"
        recipes = {
            "shipped": m.rl_recipe(
                args.cold.parent / "call-probe", policy, data.rl, seed=args.seed, steps=1,
                extra=["logging.progress=false", *args.set],
            )
        }  # fmt: skip
        where = str(policy)
    else:
        policy = args.run / f"seed{args.seed}" / args.policy / "final"
        parquet = args.run / "data" / "synth-rl" / "rl.parquet"
        task = m.TASKS[args.task]
        recipes = {
            arm: m.rl_recipe(
                args.run.parent / f"call-probe-{arm}",
                policy,
                parquet,
                arm=m.ARMS[arm],
                task=task,
                seed=args.seed,
                steps=1,
                extra=["logging.progress=false", *args.set],
            )
            for arm in ARMS
        }
        where = str(policy.relative_to(args.run))
    first = next(iter(recipes.values()))
    for key in ("think_prefix", "group_size", "batch_prompts", "temperature"):
        values = {getattr(r.rollout, key) for r in recipes.values()}
        assert len(values) == 1, f"the arms differ in rollout.{key}: {values}"
    examples = load_rl_examples(first)[: first.rollout.batch_prompts * args.batches]
    net, processor = load_model_and_processor(
        first.model, pick_device(first.distributed.device), path=policy
    )
    engine = HFEngine(net, processor)
    ro = rollout(
        examples, engine, FrameSource(first.video), build_gate(first), first, epoch=0, seed=11
    )
    g = first.rollout.group_size
    result: dict[str, Any] = {
        "policy": where,
        "overrides": args.set,
        "task": "the learning test's" if args.cold is not None else args.task,
        "episodes": len(ro.episodes),
        "group_size": g,
        "aggregation": first.loss.aggregation,
        "calls_per_episode": statistics.fmean(ep.num_tool_calls for ep in ro.episodes),
        "generated_tokens": statistics.fmean(ep.main.num_generated for ep in ro.episodes),
        "arms": {},
    }
    for arm, recipe in recipes.items():
        result["arms"][arm] = {
            form: measure(ro, engine, recipe, g, before=form == "before_clip_fractions")
            for form in ("before_clip_fractions", "now")
        }
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")


def measure(ro: Any, engine: Any, recipe: Any, g: int, *, before: bool) -> dict[str, Any]:
    """Score `ro` under `recipe` and read the per-token advantages the trainer would train on;
    `before`: as the trainer computed them before `anchor_fractions` (every anchor part at full
    value in its group's means, a clipped rollout at rate 0)."""
    from unittest import mock

    from paravt.rewards import advantage_scales
    from paravt.train.rl import (
        Rollouts,
        build_reward_config,
        score_rollouts,
        scoring,
        training_sequences,
    )
    from paravt.train.rl.scoring import _episode_anchor_parts

    patches = (
        [
            mock.patch.object(scoring, "anchor_fractions", lambda r, t, c: [1.0] * len(r)),
            mock.patch.object(
                scoring,
                "advantage_scales",
                lambda *a, **kw: advantage_scales(*a, **{**kw, "at_clip": "zero"}),
            ),
        ]
        if before
        else []
    )
    for p in patches:
        p.start()
    try:
        fresh = Rollouts(ro.episodes, ro.examples, ro.budgets)
        reward_config = build_reward_config(recipe)
        score_rollouts(fresh, reward_config, recipe)
        seqs = training_sequences(
            fresh,
            engine,
            reward_config,
            recipe.advantage,
            group_size=g,
            think_prefix=recipe.rollout.think_prefix,
            include_subagents=False,
        )
    finally:
        for p in patches:
            p.stop()
    prefix = "<think>\n" if recipe.rollout.think_prefix else ""
    # the shaped reward the advantage sees (AdvantageConfig: clip((r + bias) * scaling, 20));
    # token-level anchoring adds the anchor parts' total to r first (`score_rollouts`)
    bias, scaling = recipe.advantage.reward_bias, recipe.advantage.reward_scaling
    clip = recipe.advantage.reward_clip
    rows = []
    for n, (ep, s) in enumerate(zip(fresh.episodes, seqs)):
        trained = [i for i, k in enumerate(s.mask) if k]
        advs = s.advantages or []
        decide = _deciding_token(ep, engine, prefix)
        parts = _episode_anchor_parts(
            ep, fresh.rewards[n], engine, prefix, reward_config, recipe.advantage
        )
        anchor_total = sum(v for _, v, _ in parts)
        rows.append(
            {
                "calls": ep.num_tool_calls,
                "correct": fresh.rewards[n].accuracy,
                "reward": fresh.rewards[n].total,
                "anchor_parts_total": anchor_total,
                "shaped": (fresh.rewards[n].total + anchor_total + bias) * scaling,
                "sequence_advantage": fresh.advantages[n],
                "scale": fresh.anchor_scales[n],
                "trained_tokens": len(trained),
                "advantage_sum": sum(advs[i] for i in trained),
                "largest_token_advantage": max((abs(advs[i]) for i in trained), default=0.0),
                "deciding_token_advantage": advs[decide] if decide is not None else None,
            }
        )
    return summarise(rows, g, clip)


def _deciding_token(ep: Any, engine: Any, prefix: str) -> int | None:
    """Index in the main trajectory of the first generated token after the first turn's
    `</think>` (where the turn says `<tool_call>` or `<answer>`), or None."""
    main = ep.main
    start = next((i for i, k in enumerate(main.loss_mask) if k), None)
    if start is None:
        return None
    text, i = prefix, start
    while i < len(main.token_ids) and main.loss_mask[i]:
        text += engine.decode([main.token_ids[i]])
        i += 1
        if "</think>" in text:
            while i < len(main.token_ids) and main.loss_mask[i]:
                if engine.decode([main.token_ids[i]]).strip():
                    return i
                i += 1
            return None
    return None


def _share(flags: list[bool]) -> float | None:
    return sum(flags) / len(flags) if flags else None


def summarise(rows: list[dict[str, Any]], g: int, clip: float) -> dict[str, Any]:
    def mean(xs: list[float]) -> float | None:
        return statistics.fmean(xs) if xs else None

    tokens = sum(r["trained_tokens"] for r in rows)
    out: dict[str, Any] = {
        "mean_advantage_per_trained_token": sum(r["advantage_sum"] for r in rows) / tokens,
        "shaped_at_clip": sum(r["shaped"] >= clip for r in rows) / len(rows),
        "correct_non_callers_at_clip": _share(
            [r["shaped"] >= clip for r in rows if r["correct"] and not r["calls"]]
        ),
        "correct_callers_at_clip": _share(
            [r["shaped"] >= clip for r in rows if r["correct"] and r["calls"]]
        ),
        "groups": [
            {
                "reward_spread": statistics.pstdev([r["reward"] for r in rows[i : i + g]]),
                "scale": rows[i]["scale"],
                "callers": sum(r["calls"] > 0 for r in rows[i : i + g]),
                "accuracy": mean([r["correct"] for r in rows[i : i + g]]),
            }
            for i in range(0, len(rows), g)
        ],
    }
    for who, pick in (
        ("callers", lambda r: r["calls"] > 0),
        ("non_callers", lambda r: not r["calls"]),
    ):
        sel = [r for r in rows if pick(r)]
        out[who] = {
            "episodes": len(sel),
            "reward": mean([r["reward"] for r in sel]),
            "anchor_parts_total": mean([r["anchor_parts_total"] for r in sel]),
            "shaped": mean([min(r["shaped"], clip) for r in sel]),
            "sequence_advantage": mean([r["sequence_advantage"] for r in sel]),
            "trained_tokens": mean([r["trained_tokens"] for r in sel]),
            "advantage_sum_share": sum(r["advantage_sum"] for r in sel) / tokens,
            "deciding_token_advantage": mean(
                [
                    r["deciding_token_advantage"]
                    for r in sel
                    if r["deciding_token_advantage"] is not None
                ]
            ),
        }
    out["largest_token_advantage"] = max(r["largest_token_advantage"] for r in rows)
    return out


if __name__ == "__main__":
    main()
