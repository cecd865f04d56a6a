"""The learning-rate-0 control of a `paravt-eval reproduce` arm: is its kappa curve learnt?

For each seed of a finished reproduce run, this trains the same arm again from the same SFT
checkpoint, on the same RL prompts, with the same task, seed and steps, but at learning rate 0
(`miniature.LR_ZERO`: no float32 weight moves), and sets its kappa, truncated rate and accuracy per
step beside the trained run's. If the trained arm's kappa falls (or rises) and the control's does
not, the change is what the updates learnt, not a drift of the prompts or the sampling.

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 .nox/reproduce/bin/python experiments/reproduce_lr0_control.py \\
        --run runs/reproduce --arm grpo --seeds 0 1 2 \\
        --out experiments/results/tool_prior_paradox/costly-grpo-lr0.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

KEYS = ("kappa", "truncated_rate", "accuracy", "f_tau")


def curves(run: Path) -> dict[str, list[float]]:
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    rows = [r for r in rows if "kappa" in r]
    return {k: [round(float(r.get(k, float("nan"))), 4) for r in rows] for k in KEYS}


def ends(values: list[float], n: int = 5) -> str:
    return f"{statistics.fmean(values[:n]):.2f} -> {statistics.fmean(values[-n:]):.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, default=Path("runs/reproduce"))
    parser.add_argument("--arm", default="grpo")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import torch
    from reproduce_arm_variant import arm_recipe_from_run  # this folder (a script's sys.path[0])

    import paravt.train.miniature as m
    from paravt.train.rl import train_rl

    torch.set_num_threads(1)
    task = json.loads((args.run / "tables.json").read_text())["setup"]["task"]
    result: dict[str, Any] = {"run": str(args.run), "arm": args.arm, "task": task, "seeds": {}}
    lines = [
        f"`{args.arm}` arm of {args.run} (task `{task}`), trained vs "
        "learning rate 0, mean of the first 5 -> last 5 steps:",
        "",
        "| seed | kappa trained | kappa lr 0 | truncated trained | truncated lr 0 "
        "| accuracy trained | accuracy lr 0 |",
        "|---|---|---|---|---|---|---|",
    ]
    for seed in args.seeds:
        root = args.run / f"seed{seed}"
        out = args.run / "controls" / f"{args.arm}-lr0" / f"seed{seed}"
        recipe, _ = arm_recipe_from_run(
            args.run, args.arm, seed, out, lr=m.LR_ZERO, extra=["checkpoint.save_final=false"]
        )
        t0 = time.perf_counter()
        train_rl(recipe)
        trained, control = curves(root / args.arm), curves(out)
        result["seeds"][seed] = {
            "trained": trained,
            "lr0": control,
            "seconds": round(time.perf_counter() - t0, 1),
            "load": os.getloadavg(),
        }
        lines.append(
            f"| {seed} | {ends(trained['kappa'])} | {ends(control['kappa'])} "
            f"| {ends(trained['truncated_rate'])} | {ends(control['truncated_rate'])} "
            f"| {ends(trained['accuracy'])} | {ends(control['accuracy'])} |"
        )
        print(lines[-1], flush=True)
    result["table"] = "\n".join(lines)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(result["table"])


if __name__ == "__main__":
    main()
