"""Credit for evidence (issue 44): the learning check under the released reward and under ours,
in fp32 and in the GPU's numerics (bf16 compute over fp32 master weights), one cell per seed.

A cell is one training seed in one numeric: the cold start (500 SFT steps, as the learning test)
and the SFT policy's held-out evaluation, then 32 PARA-GRPO steps from it twice, the same seed and
data, differing in the reward (and in the step, for the reference arm):

- `reference`: the released reward (`reward.preset=reference_paragrpo`: R_tool and the
  think-before-call bonus for any call with a tool name, valid or not; gamma 0) with the step
  runs 1-9 compared against (`RELEASED_STEP`: lr 3e-4, one optimiser step a batch, KL 0.01);
- `evidence`: ours (`reward.preset=paragrpo` and the tiny recipe: since run 9, its whole
  setting), plus `--evidence-set`, which is what the learning test runs;

and, with `--controls`, the evidence run at learning rate 0 and with the policy-gradient sign
flipped. Each run's held-out evaluation (32 prompts x 8 rollouts, T = 0.7, fixed seed) is scored
under its own reward; the SFT policy's is scored under both. Per run the JSON keeps the step
metrics (accuracy, reward, call attempts, invalid calls and tool responses per episode, format
ok, f_tau, ...) and the scores per prompt.

    python experiments/evidence_credit.py --seed 0 --numeric bf16 --out runs/evidence/s0-bf16.json
    python experiments/evidence_credit_table.py runs/evidence/*.json

`--numeric fp32` is the learning test's setting (no sharding, fp32 weights and compute);
`bf16` is the GPU check's learning row (`distributed.strategy=fsdp2` with world size 1: fp32
master weights, `MixedPrecisionPolicy(param_dtype=bf16)`; the rollout engine and the evaluation
in bf16 weights); `bf16_via_fp32` is `bf16` with its matmuls through fp32 kernels
(`model.bf16_matmul=fp32`: the same rounding points, for CPUs without bf16 instructions). One torch thread per cell, whatever the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

REWARDS = {"reference": "reference_paragrpo", "evidence": "paragrpo"}
# The reference arm is the released reward with the step runs 1-9 compared against (the tiny
# recipe before it took run 9's setting): every part of that setting switched back, lr 3e-4.
RELEASED_STEP = [
    "rollout.cut_turn_calls=run",
    "reward.overrides.anchor_tool_calls=false",
    "reward.overrides.anchor_format_issues=false",
    "advantage.no_credit_on_issues=false",
    "loss.ppo_mini_batches=1",
    "loss.kl_coef=0.01",
    "optim.warmup_steps=0",
    "optim.lr=3e-4",
]
# `--remeasure`: a fresh, four times larger held-out draw (run 9's rule in experiments/README.md)
REMEASURE_GROUP, REMEASURE_SEED = 32, 54321


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seed", type=int, required=True, help="training seed (data, sampling)")
    parser.add_argument("--numeric", choices=["bf16", "bf16_via_fp32", "fp32"], required=True)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--rl-steps", type=int, default=32, help="RL steps (default 32)")
    parser.add_argument(
        "--sft-steps", type=int, default=None, help="cold-start steps (default: the test's 500)"
    )
    parser.add_argument(
        "--evidence-set",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="recipe overrides of the evidence run and its controls only, e.g. "
        "reward.overrides.penalty_unit=call reward.overrides.gamma=0.5 (probes of a setting)",
    )
    parser.add_argument(
        "--reference",
        action="store_true",
        help="with --reuse of a cold start whose JSON is missing: run the reference arm too",
    )
    parser.add_argument(
        "--controls", nargs="*", default=[], choices=["lr0", "sign"], help="evidence-run controls"
    )
    parser.add_argument(
        "--candidate",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="also train a `candidate` run: the evidence run with these overrides on top (a "
        "setting weighed against the shipped one on the same cold start, paired by prompt)",
    )
    parser.add_argument(
        "--reuse",
        type=Path,
        default=None,
        help="an earlier cell's JSON of the same seed and numeric: its cold start (the SFT model "
        "in --work) and its reference run are reused, the SFT policy is evaluated again under "
        "the current evidence preset, and only the evidence run and the controls are trained "
        "(a path that does not exist: the cold start only, no reference run)",
    )
    parser.add_argument(
        "--cold-from",
        type=Path,
        default=None,
        help="the --work folder of the same seed's cell in another numeric: its cold start (task "
        "data and SFT policy) is copied into this cell's --work and used as this cell's, and the "
        "reference run is trained here (a bf16 cell from the fp32 cell's cold start: the two "
        "numerics then differ only in RL, and no bf16 cold start is needed, which took about "
        "32 minutes a seed on a CPU without fast bf16 kernels)",
    )
    parser.add_argument(
        "--remeasure",
        choices=["reference", "evidence", "candidate", "lr0", "sign"],
        default=None,
        help="measure one run of the finished cell --out again on a fresh held-out draw "
        f"({REMEASURE_GROUP} rollouts a prompt, sampling seed {REMEASURE_SEED}), the SFT policy "
        "beside it, from the cell's --work; written into the cell's JSON under 'remeasured'",
    )
    parser.add_argument("--work", type=Path, default=None, help="scratch (default: beside --out)")
    parser.add_argument("--out", type=Path, required=True, help="the cell's JSON")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.remeasure is not None:
        remeasure(args)
        return

    import torch

    from paravt.core.testing import cached_tiny_qwen3vl
    from paravt.rewards import RewardConfig
    from paravt.train.miniature import (
        LR,
        LR_ZERO,
        NUMERICS,
        ColdStart,
        Evaluation,
        cold_start,
        evaluate_held_out,
        format_held,
        load_rl_examples,
        make_task_data,
        paired,
        rl_from_cold_start,
        rl_recipe,
    )

    torch.set_num_threads(args.threads)
    tag = f"s{args.seed}-{args.numeric}"
    work = args.work or args.out.parent / f"work-{tag}"
    numeric = list(NUMERICS[args.numeric])
    t0 = time.perf_counter()

    def scores(ev: object) -> dict[str, object]:
        return {"metrics": ev.metrics, "per_prompt": ev.per_prompt}  # type: ignore[attr-defined]

    if args.cold_from is not None:
        if args.reuse is not None:
            raise SystemExit("--cold-from and --reuse are two ways to reuse a cold start: pick one")
        source = args.cold_from / "cold"
        if not (source / "sft" / "final" / "config.json").is_file():
            raise SystemExit(f"--cold-from {args.cold_from}: no cold start's SFT model there yet")
        marker, origin = work / "cold" / "COPIED_FROM", str(source.resolve())
        if not (work / "cold").exists():  # the task data and the SFT policy, not its evaluations
            shutil.copytree(source, work / "cold", ignore=shutil.ignore_patterns("held*"))
            marker.write_text(origin)
        elif not marker.is_file() or marker.read_text() != origin:
            raise SystemExit(
                f"--cold-from {args.cold_from}: {work / 'cold'} already holds another cold start "
                f"({marker.read_text() if marker.is_file() else 'not copied by --cold-from'}); "
                "give this cell a fresh --work"
            )
    reuse_cold = args.reuse is not None or args.cold_from is not None
    earlier = json.loads(args.reuse.read_text()) if args.reuse and args.reuse.is_file() else None
    if args.reuse is not None and earlier is None:
        print(
            f"[{tag}] {args.reuse} not there: reusing the cold start only, "
            + ("the reference run again" if args.reference else "no reference run")
        )
    if earlier is not None and (earlier["seed"], earlier["numeric"]) != (args.seed, args.numeric):
        raise SystemExit(f"--reuse {args.reuse} is another cell: {earlier['seed']=}")
    if reuse_cold:
        data = make_task_data(work / "cold", seed_offset=args.seed)
        sft_model = work / "cold" / "sft" / "final"
        if not (sft_model / "config.json").is_file():
            raise SystemExit(f"--reuse needs the earlier cold start's SFT model at {sft_model}")
        held_recipe = rl_recipe(
            work / "cold" / "held",
            sft_model,
            data.held_out,
            seed=args.seed,
            extra=[*numeric, *args.evidence_set],
        )
        held = load_rl_examples(held_recipe)
        cold = ColdStart(
            args.seed,
            work / "cold",
            data,
            sft_model,
            held,
            evaluate_held_out(sft_model, held_recipe, held),
        )
    else:
        cold = cold_start(
            work / "cold", cached_tiny_qwen3vl(seed=0), seed=args.seed, extra=numeric,
            sft_steps=args.sft_steps,
        )  # fmt: skip
    before = {"evidence": cold.before}
    if args.evidence_set and not reuse_cold:  # the cold start evaluated under the preset
        ev_held = rl_recipe(
            work / "held-ev",
            cold.sft_model,
            cold.data.held_out,
            seed=args.seed,
            extra=[*numeric, *args.evidence_set],
        )
        before["evidence"] = evaluate_held_out(cold.sft_model, ev_held, cold.held)
    if earlier is not None:
        ref = earlier["before"]["reference"]
        before["reference"] = Evaluation(ref["metrics"], ref["per_prompt"])
    elif not reuse_cold or args.reference or args.cold_from is not None:
        ref_held = rl_recipe(
            work / "held-ref",
            cold.sft_model,
            cold.data.held_out,
            seed=args.seed,
            extra=[*numeric, f"reward.preset={REWARDS['reference']}", *RELEASED_STEP],
        )
        before["reference"] = evaluate_held_out(cold.sft_model, ref_held, cold.held)
    presets = {
        k: {
            f: getattr(RewardConfig.preset(v), f)
            for f in ("tool_credit", "gamma", "lambda_anchor", "answer_suffix")
        }
        for k, v in REWARDS.items()
    }
    cell: dict[str, object] = {
        "seed": args.seed,
        "numeric": args.numeric,
        "overrides": numeric,
        "torch": torch.__version__,
        "capability": torch.backends.cpu.get_cpu_capability(),
        "threads": args.threads,
        "rl_steps": args.rl_steps,
        "rewards": presets,
        "evidence_set": args.evidence_set,
        "candidate": args.candidate,
        "reused": str(args.reuse) if args.reuse else None,
        "cold_from": str(args.cold_from) if args.cold_from else None,
        "before": {k: scores(v) for k, v in before.items()},
        "time_s": {"cold_start": round(time.perf_counter() - t0, 1)},
        "runs": {},
    }
    runs = {"evidence": ("evidence", LR, "")}
    if not reuse_cold or (earlier is None and (args.reference or args.cold_from is not None)):
        runs = {"reference": ("reference", LR, ""), **runs}
    elif earlier is not None:
        cell["runs"]["reference"] = earlier["runs"]["reference"]  # type: ignore[index]
    if args.candidate:
        runs["candidate"] = ("evidence", LR, "")
    for control in args.controls:
        runs[control] = (
            "evidence",
            LR_ZERO if control == "lr0" else LR,
            "sign" * (control == "sign"),
        )
    for name, (reward, lr, sabotage) in runs.items():
        t = time.perf_counter()
        (after,) = rl_from_cold_start(
            cold,
            work / name,
            lr=lr,
            steps=args.rl_steps,
            sabotage=sabotage,
            extra=[
                *numeric,
                f"reward.preset={REWARDS[reward]}",
                *(args.evidence_set if reward == "evidence" else RELEASED_STEP),
                *(args.candidate if name == "candidate" else []),
                # the lr-0 control stays at lr 0 whatever --evidence-set says (run 4's first
                # lr-0 controls ran at its optim.lr=1e-4: they repeated the evidence arm)
                *([f"optim.lr={lr}"] if lr == LR_ZERO else []),
            ],
        ).values()
        b = before[reward]
        acc, acc_se = paired(after, b, "accuracy")
        rew, rew_se = paired(after, b, "reward")
        m0, m1 = b.metrics, after.metrics
        cell["runs"][name] = {  # type: ignore[index]
            "reward": REWARDS[reward],
            "lr": lr,
            "sabotage": sabotage,
            "after": scores(after),
            "accuracy_gain": [acc, acc_se],
            "reward_gain": [rew, rew_se],
            "format_held": format_held(m0, m1),
        }
        cell["time_s"][name] = round(time.perf_counter() - t, 1)  # type: ignore[index]
        print(
            f"[{tag}] {name}: acc {m0['accuracy']:.3f} -> {m1['accuracy']:.3f} ({acc:+.3f}), "
            f"reward {m0['reward/total']:.3f} -> {m1['reward/total']:.3f} ({rew:+.3f}), "
            f"calls {m0['tool/call_attempts']:.2f} -> {m1['tool/call_attempts']:.2f}, invalid "
            f"{m0['tool/invalid_calls']:.2f} -> {m1['tool/invalid_calls']:.2f}, format ok "
            f"{m0['format_ok']:.2f} -> {m1['format_ok']:.2f}",
            flush=True,
        )
    cell["time_s"]["total"] = round(time.perf_counter() - t0, 1)  # type: ignore[index]
    cell["load_average"] = os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(cell, indent=1))
    tmp.replace(args.out)
    print(f"[{tag}] wrote {args.out} in {cell['time_s']['total']:.0f} s")  # type: ignore[index]


def remeasure(args: argparse.Namespace) -> None:
    """`--remeasure RUN`: the run's trained policy and the SFT policy on the cell's held-out
    videos again, under the run's reward, with four times the episodes and another sampling
    seed; the cell's JSON gains `remeasured[RUN]` (`evidence_credit_table.py` reads it)."""
    import torch

    from paravt.train.miniature import (
        NUMERICS,
        evaluate_held_out,
        load_rl_examples,
        make_task_data,
        rl_recipe,
    )

    torch.set_num_threads(args.threads)
    if not args.out.is_file():
        raise SystemExit(f"--remeasure: no finished cell at {args.out}")
    cell = json.loads(args.out.read_text())
    if (cell["seed"], cell["numeric"]) != (args.seed, args.numeric):
        raise SystemExit(f"--remeasure: {args.out} is seed {cell['seed']} in {cell['numeric']}")
    run = cell["runs"].get(args.remeasure)
    work = args.work or args.out.parent / f"work-s{args.seed}-{args.numeric}"
    model = work / args.remeasure / "final"
    if run is None or not (model / "config.json").is_file():
        raise SystemExit(f"--remeasure {args.remeasure}: not in {args.out}, or no {model}")
    reward = "reference" if run["reward"] == REWARDS["reference"] else "evidence"
    t0 = time.perf_counter()
    data = make_task_data(work / "cold", seed_offset=args.seed)
    sft_model = work / "cold" / "sft" / "final"
    recipe = rl_recipe(
        work / f"remeasure-{args.remeasure}",
        sft_model,
        data.held_out,
        seed=args.seed,
        extra=[
            *NUMERICS[args.numeric],
            f"reward.preset={run['reward']}",
            *(cell["evidence_set"] if reward == "evidence" else RELEASED_STEP),
            *(cell.get("candidate", []) if args.remeasure == "candidate" else []),
            f"rollout.group_size={REMEASURE_GROUP}",
        ],
    )
    held = load_rl_examples(recipe)
    evals = {
        when: evaluate_held_out(m, recipe, held, seed=REMEASURE_SEED)
        for when, m in (("before", sft_model), ("after", model))
    }
    found = {
        "group_size": REMEASURE_GROUP,
        "seed": REMEASURE_SEED,
        **{when: {"metrics": e.metrics, "per_prompt": e.per_prompt} for when, e in evals.items()},
        "time_s": round(time.perf_counter() - t0, 1),
    }
    cell.setdefault("remeasured", {})[args.remeasure] = found
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(cell, indent=1))
    tmp.replace(args.out)
    b, a = evals["before"].metrics, evals["after"].metrics
    print(
        f"[s{args.seed}-{args.numeric}] {args.remeasure} re-measured ({REMEASURE_GROUP} a "
        f"prompt): invalid {a['tool/invalid_calls']:.3f}, format ok {b['format_ok']:.3f} -> "
        f"{a['format_ok']:.3f} in {found['time_s']:.0f} s"
    )


if __name__ == "__main__":
    main()
