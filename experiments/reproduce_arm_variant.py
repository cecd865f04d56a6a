"""One more arm beside a finished `paravt-eval reproduce` run: an arm with extra recipe overrides,
trained from each seed's SFT checkpoint (same RL prompts, task, seed and steps) and evaluated on
the same held-out videos with reproduce's own accuracy cells (greedy, its recorded protocol).

Written for issue 25: on the `costly` task the gated arms (gate over K = 2 and 4) call twice at
every K, so at K = 8 their answer does not fit the context. Does a gate that includes the dense
budget (the paper's gate includes its fixed 64 frames) teach the policy to call less there?

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 .nox/reproduce/bin/python experiments/reproduce_arm_variant.py \\
        --run runs/reproduce --arm para_grpo --name gate248 --seeds 0 1 2 \\
        --override 'gating.choices=[2,4,8]' \\
        --out experiments/results/tool_prior_paradox/costly-para_grpo-gate248.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any


def arm_recipe_from_run(
    run: Path, arm: str, seed: int, out: Path, *, extra: list[str], lr: float | None = None
) -> tuple[Any, str]:
    """The recipe of `arm` of the finished reproduce run `run` for `seed`, writing to `out`: from
    that seed's SFT checkpoint, on the run's RL prompts, with its task (as its tables.json
    records it) and its RL steps, plus `extra` overrides (and `lr`). Returns (recipe, task name)."""
    import paravt.train.miniature as m

    task = json.loads((run / "tables.json").read_text())["setup"]["task"]
    done = json.loads((run / f"seed{seed}" / arm / "done.json").read_text())
    recipe = m.rl_recipe(
        out,
        run / f"seed{seed}" / "sft" / "final",
        run / "data" / "synth-rl" / "rl.parquet",
        arm=m.ARMS[arm],
        task=m.TASKS[task],
        seed=seed,
        steps=int(done["settings"]["steps"]),
        **({"lr": lr} if lr is not None else {}),
        extra=["logging.progress=false", *extra],
    )
    return recipe, task


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, default=Path("runs/reproduce"))
    parser.add_argument("--arm", default="para_grpo")
    parser.add_argument("--name", required=True, help="name of the variant (its directories)")
    parser.add_argument("--override", nargs="+", required=True, help="recipe overrides")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", type=Path, required=True, help="the result JSON")
    parser.add_argument(
        "--work", type=Path, default=None, help="checkpoints and cells (default: RUN/variants)"
    )
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import torch

    from paravt.eval.reproduce.cells import (
        accuracy_cell,
        held_out_documents,
        protocol_source,
        training_curves,
    )
    from paravt.eval.reproduce.config import ReproduceConfig
    from paravt.train.rl import train_rl

    torch.set_num_threads(1)
    task = json.loads((args.run / "tables.json").read_text())["setup"]["task"]
    variant = f"{args.arm}_{args.name}"
    work = args.work or args.run / "variants"
    config = ReproduceConfig(out=work, task=task)
    docs = held_out_documents(args.run / "data" / "synth-held" / "rl.parquet")
    result: dict[str, Any] = {
        "run": str(args.run),
        "arm": args.arm,
        "variant": variant,
        "overrides": args.override,
        "task": task,
        "seeds": {},
    }
    for seed in args.seeds:
        root = args.run / f"seed{seed}"
        out = work / f"seed{seed}" / variant
        t0 = time.perf_counter()
        if not (out / "final" / "config.json").is_file():
            recipe, _ = arm_recipe_from_run(args.run, args.arm, seed, out, extra=args.override)
            train_rl(recipe)
        seconds = round(time.perf_counter() - t0, 1)
        protocol = protocol_source(out / "final", args.run / "protocol")
        cells = {
            k: accuracy_cell(config, seed, variant, out / "final", k, docs, protocol)
            for k in config.eval_budgets
        }
        ref = {
            k: json.loads(
                (args.run / "cells" / f"seed{seed}" / f"{args.arm}__acc_k{k}.json").read_text()
            )
            for k in config.eval_budgets
        }
        curves = training_curves(out)
        result["seeds"][seed] = {
            "train_seconds": seconds,
            "load": os.getloadavg(),
            "kappa_last5": statistics.fmean(curves["kappa"][-5:]),
            "kappa_last5_arm": statistics.fmean(training_curves(root / args.arm)["kappa"][-5:]),
            "accuracy": {k: c["accuracy"] for k, c in cells.items()},
            "eval_kappa": {k: c["kappa"] for k, c in cells.items()},
            "accuracy_arm": {k: c["accuracy"] for k, c in ref.items()},
            "eval_kappa_arm": {k: c["kappa"] for k, c in ref.items()},
            "curves": curves,
        }
        r = result["seeds"][seed]
        print(
            f"seed {seed}: {variant} kappa (last 5 steps) {r['kappa_last5']:.2f} "
            f"[{args.arm} {r['kappa_last5_arm']:.2f}]; held-out accuracy / calls "
            + ", ".join(
                f"K={k} {r['accuracy'][k]:.2f}/{r['eval_kappa'][k]:.1f} "
                f"[{r['accuracy_arm'][k]:.2f}/{r['eval_kappa_arm'][k]:.1f}]"
                for k in config.eval_budgets
            )
            + f" ({seconds:.0f} s training)",
            flush=True,
        )
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
