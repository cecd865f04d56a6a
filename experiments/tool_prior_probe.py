"""Probe the `prior` task's SFT policy before any RL (issue 32): does the tool prior leak, is the
dense budget often but not always enough, and what is a call worth at each budget?

For one seed: the task data (`paravt.train.miniature.TASKS["prior"]`), the tiny base model, the
tool-prior stage, then cold starts of several lengths from it (`--cold-steps`). Each policy is
rolled out without an update under two arms' recipes, as their first RL step would see it
(`ARMS["grpo"]`: no think prefix, vanilla reward, the dense K; `ARMS["para_grpo"]`: think prefix,
PARA-GRPO reward with token-level anchoring, the gate), at the rollout temperature. Per arm and
overview budget K it reports kappa, the share of episodes that call, the prior's leak rate, the
common format measure, accuracy with and without a call, and the mean GRPO advantage of calling
episodes (positive: GRPO raises kappa there).

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 .nox/tests/bin/python experiments/tool_prior_probe.py \
        --seed 0 --work /tmp/tpp-prior --cold-steps 75 150 300 \
        --out experiments/results/tool_prior_paradox/prior-probe-s0.json
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def _split(ro: Any) -> dict[str, Any]:
    from paravt.rewards import episode_structure

    out: dict[str, Any] = {}
    for k in sorted(set(ro.budgets)):
        idx = [i for i, b in enumerate(ro.budgets) if b == k]
        calls = [i for i in idx if ro.episodes[i].num_tool_calls > 0]
        skips = [i for i in idx if ro.episodes[i].num_tool_calls == 0]
        shapes = [episode_structure([t.parsed for t in ro.episodes[i].turns]) for i in idx]

        def mean(xs: list[float]) -> float | None:
            return round(sum(xs) / len(xs), 4) if xs else None

        out[f"k{k}"] = {
            "episodes": len(idx),
            "kappa": mean([float(ro.episodes[i].num_tool_calls) for i in idx]),
            "calling_share": mean([float(i in calls) for i in idx]),
            "leak_rate": mean([float(s.prior_leak) for s in shapes]),
            "leak_tool_code": mean([float(s.tool_code) for s in shapes]),
            "leak_untagged_answer": mean([float(s.untagged_answer) for s in shapes]),
            "format_ok": mean([float(s.parses) for s in shapes]),
            "accuracy_call": mean([ro.rewards[i].accuracy for i in calls]),
            "accuracy_skip": mean([ro.rewards[i].accuracy for i in skips]),
            "reward_call": mean([ro.rewards[i].total for i in calls]),
            "reward_skip": mean([ro.rewards[i].total for i in skips]),
            "advantage_call": mean([ro.advantages[i] for i in calls]),
            "advantage_skip": mean([ro.advantages[i] for i in skips]),
        }
    return out


def sft_stage(
    out: Path,
    init: Path,
    data: Any,
    task: Any,
    *,
    seed: int,
    steps: int,
    prior: bool,
    extra: Sequence[str] = (),
) -> Path:
    """One SFT stage of the task (`prior`: the tool prior's traces, else the cold start's) from
    `init` into `out`, unless `out/final` is there already; returns `out/final`."""
    from paravt.train import miniature as m
    from paravt.train import train_sft

    final = out / "final"
    if not (final / "config.json").is_file():
        t0 = time.perf_counter()
        recipe = m.sft_recipe(
            out, init, data, seed=seed, steps=steps, extra=extra, task=task, prior=prior
        )
        train_sft(recipe)
        print(f"{out.name}: {steps} steps in {time.perf_counter() - t0:.0f} s", flush=True)
    return final


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work", type=Path, required=True, help="scratch directory (reused)")
    ap.add_argument("--out", type=Path, required=True, help="JSON results")
    ap.add_argument("--cold-steps", type=int, nargs="+", default=[150])
    ap.add_argument("--prior-steps", type=int, default=None)
    ap.add_argument("--prompts", type=int, default=32, help="RL prompts per probe (x group 8)")
    ap.add_argument("--synth", nargs="*", default=[], help="extra data.synth overrides")
    ap.add_argument(
        "--prior-think", action="store_true", help="the prior's calling turn thinks first"
    )
    ap.add_argument(
        "--cold-extra", nargs="*", default=[], help="extra recipe overrides of the cold start"
    )
    args = ap.parse_args()

    from paravt.core.testing import build_tiny_qwen3vl
    from paravt.train import load_rl_examples
    from paravt.train import miniature as m

    task = m.TASKS["prior"]
    if args.synth:
        task = m.Task(**{**task.__dict__, "synth": (*task.synth, *args.synth)})
    if args.prior_think:
        task = m.Task(**{**task.__dict__, "prior_think": True})
    prior_steps = args.prior_steps if args.prior_steps is not None else task.prior_steps
    work = args.work
    data = m.make_task_data(work / "data", sft_budgets=task.sft_k, seed_offset=args.seed, task=task)
    base = work / f"s{args.seed}" / "base"
    if not (base / "config.json").is_file():
        build_tiny_qwen3vl(base, seed=args.seed)
    quiet = ["logging.progress=false"]
    results: dict[str, Any] = {
        "seed": args.seed,
        "task": task.summary,
        "synth": list(task.synth),
        "prior_steps": prior_steps,
        "prior_think": task.prior_think,
        "load_before": os.getloadavg(),
        "policies": {},
    }

    def sft(out: Path, init: Path, steps: int, prior: bool, extra: Sequence[str] = ()) -> Path:
        return sft_stage(
            out, init, data, task, seed=args.seed, steps=steps, prior=prior, extra=[*quiet, *extra]
        )

    prior_model = (
        sft(
            work / f"s{args.seed}" / f"prior{prior_steps}{'-think' if task.prior_think else ''}",
            base,
            prior_steps,
            True,
        )
        if prior_steps
        else base
    )
    policies = {"prior": prior_model} if prior_steps else {}
    tag = "-".join(x.replace("=", "").replace(".", "") for x in args.cold_extra)
    for steps in args.cold_steps:
        name = f"cold{steps}" + (f"-{tag}" if tag else "")
        policies[name] = sft(
            work / f"s{args.seed}" / f"p{prior_steps}{'-think' if task.prior_think else ''}-{name}",
            prior_model,
            steps,
            False,
            list(args.cold_extra),
        )
    results["cold_extra"] = list(args.cold_extra)
    for name, model in policies.items():
        results["policies"][name] = {}
        for arm_name in ("grpo", "para_grpo"):
            recipe = m.rl_recipe(
                work / f"s{args.seed}" / "probe",
                model,
                data.rl,
                arm=m.ARMS[arm_name],
                task=task,
                seed=args.seed,
                steps=1,
                extra=quiet,
            )
            examples = load_rl_examples(recipe)[: args.prompts]
            t0 = time.perf_counter()
            ro = m.scored_rollouts(model, recipe, examples)
            split = _split(ro)
            results["policies"][name][arm_name] = split
            print(f"== {name} / {arm_name} ({time.perf_counter() - t0:.0f} s)", flush=True)
            for k, row in split.items():
                print(f"  {k}: " + ", ".join(f"{a}={b}" for a, b in row.items()), flush=True)
    results["load_after"] = os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
