"""The held-out episodes a trained policy writes off ParaVT's format, with what the reward paid
them (issue 44): a cell of `evidence_credit.py` reports only how many held-out episodes were off
format; this shows which ones and how they broke.

It evaluates `--model` on the cell's held-out videos as `evidence_credit.py` does (the same
examples, temperature, group size and fixed seed, `scored_rollouts`; the draw can differ from the
cell's by an episode or two, since which requests the in-process engine batches together depends
on timing), and writes every
episode whose structure does not parse (`paravt.rewards.episode_structure(...).parses`, the
`format_ok` measure) with its turns, its accuracy and its reward under the recipe's reward.

    python experiments/held_out_off_format.py --seed 4 --work <the cell's --work folder> \\
        --model <the cell's --work>/evidence/final --set rollout.cut_turn_calls=skip \\
        --out experiments/results/evidence_credit_run6/s4-fp32-off-format.json

`--set` takes the cell's `--evidence-set` overrides (numerics too: `model.dtype=bfloat16 ...`).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seed", type=int, required=True, help="the cell's seed")
    parser.add_argument("--work", type=Path, required=True, help="the cell's --work folder")
    parser.add_argument("--model", type=Path, required=True, help="the trained policy")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", dest="overrides")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--out", type=Path, required=True, help="the JSON written")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import torch

    from paravt.rewards import episode_structure
    from paravt.train.miniature import load_rl_examples, make_task_data, rl_recipe, scored_rollouts

    torch.set_num_threads(args.threads)
    data = make_task_data(args.work / "cold", seed_offset=args.seed)
    recipe = rl_recipe(
        args.work / f"held-{args.out.stem}",
        args.model,
        data.held_out,
        seed=args.seed,
        extra=args.overrides,
    )
    ro = scored_rollouts(args.model, recipe, load_rl_examples(recipe))
    off = []
    for ep, ex, r in zip(ro.episodes, ro.examples, ro.rewards):
        if episode_structure([t.parsed for t in ep.turns]).parses:
            continue
        off.append(
            {
                "prompt": ex.key,
                "accuracy": r.accuracy,
                "format": r.format,
                "reward": r.total,
                "turns": [
                    {"text": t.response, "finish": t.finish_reason, "tokens": t.num_tokens}
                    for t in ep.turns
                ],
            }
        )
    endings = collections.Counter(e["turns"][-1]["text"][-60:] for e in off)
    paid = collections.Counter((e["accuracy"], e["reward"]) for e in off)
    summary = {
        "episodes": len(ro.episodes),
        "off_format": len(off),
        "last_turn_endings": endings.most_common(10),
        "accuracy_reward_counts": [[a, r, n] for (a, r), n in sorted(paid.items())],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"summary": summary, "off_format": off}, indent=1) + "\n")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
