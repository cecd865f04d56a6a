"""The token-level anchor term's size next to the advantage, before and after issue 44 (a probe
of an SFT policy, never of a trained arm).

One RL step's rollouts of the SFT policy (the learning test's task and settings, token-level
anchoring with the tool-call boundaries on, as the `prior` task's anchored arms), scored once,
then turned into per-token advantages two ways:

- before: the outcome advantage (group- and batch-normalised reward without the anchor) on every
  token, plus the anchor's reward vector times `reward_scaling` on the structural tokens;
- after (paravt-train now): advantages on reward + anchor total, the anchor's share moved onto its
  tokens, each part against the group's mean of that part (`paravt.rewards.anchor_advantages`).

It prints, over the step's episodes: the typical |sequence advantage|, and on the structural
tokens the anchor term's mean and largest size, its share of the token's advantage, and how many
episodes' `</think>` carried it.

    python experiments/anchor_units_probe.py --cold runs/evidence/work-s0-fp32/cold --seed 0 \\
        --out experiments/results/anchor_units_probe.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--cold", type=Path, required=True, help="a cold start's folder (miniature.cold_start)"
    )
    parser.add_argument("--seed", type=int, default=0, help="the cold start's training seed")
    parser.add_argument("--out", type=Path, default=None, help="write the numbers as JSON here")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import torch

    from paravt.core.engines import HFEngine
    from paravt.rewards import AdvantageConfig, anchor_advantages, group_advantages
    from paravt.train.frames import FrameSource
    from paravt.train.miniature import make_task_data, rl_recipe
    from paravt.train.modeling import load_model_and_processor, pick_device
    from paravt.train.rl import build_gate, build_reward_config, load_rl_examples, rollout
    from paravt.train.rl.scoring import _episode_anchor_parts, score_rollouts

    torch.set_num_threads(1)
    data = make_task_data(args.cold, seed_offset=args.seed)
    sft = args.cold / "sft" / "final"
    recipe = rl_recipe(
        args.cold.parent / "anchor-probe",
        sft,
        data.rl,
        seed=args.seed,
        extra=[
            "advantage.token_level_anchoring=true",
            "reward.overrides.anchor_tool_calls=true",
            "logging.progress=false",
        ],
    )
    reward_config = build_reward_config(recipe)
    examples = load_rl_examples(recipe)[: recipe.rollout.batch_prompts * 2]
    net, processor = load_model_and_processor(
        recipe.model, pick_device(recipe.distributed.device), path=sft
    )
    engine = HFEngine(net, processor)
    ro = rollout(
        examples, engine, FrameSource(recipe.video), build_gate(recipe), recipe, epoch=0, seed=7
    )
    score_rollouts(ro, reward_config, recipe)  # after: combined advantages and scales
    a = recipe.advantage
    config = AdvantageConfig(
        estimator=a.estimator,
        reward_scaling=a.reward_scaling,
        reward_bias=a.reward_bias,
        batch_norm=a.batch_norm,
    )
    outcome = group_advantages(
        [r.total for r in ro.rewards], recipe.rollout.group_size, config=config
    )
    prefix = "<think>\n" if recipe.rollout.think_prefix else ""

    parts = [
        _episode_anchor_parts(ep, r, engine, prefix, reward_config, recipe.advantage)
        for ep, r in zip(ro.episodes, ro.rewards)
    ]
    credits, shares = anchor_advantages(
        parts, ro.anchor_scales, recipe.rollout.group_size, fractions=ro.anchor_fractions
    )

    before_terms: list[float] = []
    after_terms: list[float] = []
    before_share: list[float] = []
    after_share: list[float] = []
    think_tokens_before = think_tokens_after = 0
    for n in range(len(ro.episodes)):
        # the earlier form: each part's raw value spread over its tokens, times reward_scaling
        # (what `anchor_token_rewards` gave per turn), on top of the outcome advantage
        old: dict[int, float] = {}
        for _, value, tokens in parts[n]:
            for t in tokens:
                old[t] = old.get(t, 0.0) + value / len(tokens) * a.reward_scaling
        for v in filter(None, old.values()):
            before_terms.append(abs(v))
            before_share.append(abs(v) / (abs(v) + abs(outcome[n])))
        base = ro.advantages[n] - shares[n]
        for v in credits[n].values():
            after_terms.append(abs(v))
            after_share.append(abs(v) / (abs(v) + abs(base)))
        close = [name for name, _, _ in parts[n] if name == "close_think"]
        think_tokens_before += bool(close)
        think_tokens_after += bool(close) and any(abs(v) > 1e-9 for v in credits[n].values())

    def stats(xs: list[float]) -> dict[str, float]:
        if not xs:
            return {"n": 0}
        return {
            "n": len(xs),
            "mean": statistics.fmean(xs),
            "median": statistics.median(xs),
            "max": max(xs),
        }

    result = {
        "episodes": len(ro.episodes),
        "group_size": recipe.rollout.group_size,
        "sequence_advantage_abs": {
            "before (outcome only)": stats([abs(x) for x in outcome]),
            "after (reward + anchor total)": stats([abs(x) for x in ro.advantages]),
        },
        "anchor_term_abs_on_structural_tokens": {
            "before": stats(before_terms),
            "after": stats(after_terms),
        },
        "anchor_share_of_token_advantage": {
            "before": stats(before_share),
            "after": stats(after_share),
        },
        "episodes_closing_think": think_tokens_before,
        "of_them_with_a_nonzero_anchor_term_after": think_tokens_after,
        "accuracy": statistics.fmean(r.accuracy for r in ro.rewards),
        "anchor_parts_seen": sorted({name for p in parts for name, _, _ in p}),
    }
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
