"""One cell of the learning test's measured distribution: seed x torch threads x CPU kernels.

The learning test (`packages/paravt-train/tests/test_learning.py`) is deterministic on one machine
but its numbers move with the floating-point kernels (a fresh clone on another CPU failed it). This
script runs what the test runs, for one training seed, under one thread count and one torch CPU
capability, and keeps the held-out scores per prompt so any test design can be judged on them:

- the cold start (task data for the seed, 500 SFT steps) and the SFT policy's held-out scores;
- PARA-GRPO from it, evaluated after each step in `--eval-at` (checkpoints of one run; with a
  step before the last among them the learning-rate schedule is constant, so step 16 of a
  32-step run is the 16-step run; evaluated at the last step alone, as the test is, the run is
  the shipped recipe with its decaying step);
- the controls, each as long as the longest `--eval-at`: learning rate 0, the policy-gradient sign
  flipped, the loss mask inverted.

    python experiments/learning_distribution.py --seed 0 --threads 1 --capability avx2 \\
        --out runs/learning/s0-t1-avx2.json

`--numeric bf16` runs the same cell in the GPU's numerics (bf16 compute over fp32 master
weights), as `PARAVT_LEARNING_NUMERIC=bf16` does for the test.

`--capability` sets `ATEN_CPU_CAPABILITY` (torch's kernels for an older or newer x86 CPU: default,
avx2, avx512) and re-runs the script under it, since torch reads it once at import.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

CAPABILITIES = ("default", "avx2", "avx512")
NUMERIC_NAMES = ("bf16", "bf16_via_fp32", "fp32")  # miniature.NUMERICS' keys (imported later)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--seed", type=int, required=True, help="training seed (data, order, sampling)"
    )
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    parser.add_argument(
        "--capability",
        choices=CAPABILITIES,
        default=None,
        help="torch CPU kernels (ATEN_CPU_CAPABILITY); default: what this CPU picks",
    )
    parser.add_argument(
        "--numeric",
        choices=sorted(NUMERIC_NAMES),
        default="fp32",
        help="fp32 (the test's default) or bf16: the GPU's bf16 compute over fp32 master weights "
        "(miniature.NUMERICS), for the cold start, the runs and the evaluations; bf16_via_fp32: "
        "the same rounding points with the matmuls through fp32 kernels, for CPUs without bf16 "
        "instructions (native bf16 is about 7x slower end to end there)",
    )
    parser.add_argument(
        "--eval-at",
        type=int,
        nargs="+",
        default=[8, 16, 24, 32],
        help="RL steps at which the held-out evaluation runs (default 8 16 24 32)",
    )
    parser.add_argument(
        "--controls",
        nargs="*",
        default=["lr0", "sign", "mask"],
        choices=["lr0", "sign", "mask"],
        help="control runs (default all three), each as long as the last --eval-at",
    )
    parser.add_argument(
        "--sft-videos",
        type=int,
        default=None,
        help="videos with cold-start teacher traces (default: miniature.SFT_VIDEOS)",
    )
    parser.add_argument(
        "--work", type=Path, default=None, help="scratch directory (default: next to --out)"
    )
    parser.add_argument("--out", type=Path, required=True, help="where the cell's JSON goes")
    args = parser.parse_args()
    if args.sft_videos is not None and args.sft_videos < 1:
        parser.error(f"--sft-videos {args.sft_videos}: at least 1 video")

    if args.capability and os.environ.get("ATEN_CPU_CAPABILITY") != args.capability:
        os.environ["ATEN_CPU_CAPABILITY"] = args.capability
        os.execv(sys.executable, [sys.executable, *sys.argv])
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import torch

    from paravt.core.testing import cached_tiny_qwen3vl
    from paravt.train.miniature import (
        LR,
        LR_ZERO,
        NUMERICS,
        SFT_VIDEOS,
        cold_start,
        rl_from_cold_start,
    )

    torch.set_num_threads(args.threads)
    capability = torch.backends.cpu.get_cpu_capability()
    tag = f"s{args.seed}-t{args.threads}-{capability.lower()}" + (
        "" if args.numeric == "fp32" else f"-{args.numeric}"
    )
    work = args.work or args.out.parent / f"work-{tag}"
    steps = max(args.eval_at)
    t0 = time.perf_counter()

    def scores(ev: object) -> dict[str, object]:
        return {"metrics": ev.metrics, "per_prompt": ev.per_prompt}  # type: ignore[attr-defined]

    numeric = NUMERICS[args.numeric]
    sft_videos = SFT_VIDEOS if args.sft_videos is None else args.sft_videos
    cold = cold_start(
        work / "cold",
        cached_tiny_qwen3vl(seed=0),
        seed=args.seed,
        extra=numeric,
        sft_videos=sft_videos,
    )
    t_cold = time.perf_counter() - t0
    cell: dict[str, object] = {
        "seed": args.seed,
        "threads": args.threads,
        "capability": capability,
        "numeric": args.numeric,
        "torch": torch.__version__,
        "sft_videos": sft_videos,
        "before": scores(cold.before),
        "time_s": {"cold_start": round(t_cold, 1)},
    }
    runs = {"para_grpo": ("", LR)} | {
        c: ("" if c == "lr0" else c, LR_ZERO if c == "lr0" else LR) for c in args.controls
    }
    for name, (sabotage, lr) in runs.items():
        t = time.perf_counter()
        eval_at = args.eval_at if name == "para_grpo" else [s for s in args.eval_at if s >= 16]
        # checkpoints before the last step read as shorter runs only under a constant step (the
        # distribution's 8 / 16 / 24 were measured so); evaluated at the last step alone (the
        # learning test), the run is the shipped recipe, its decaying step included
        schedule = ["optim.schedule=constant"] if any(s != steps for s in eval_at) else []
        evals = rl_from_cold_start(
            cold,
            work / name,
            lr=lr,
            steps=steps,
            sabotage=sabotage,
            extra=[*numeric, *schedule],
            eval_at=eval_at,
        )
        cell[name] = {str(s): scores(ev) for s, ev in evals.items()}
        cell["time_s"][name] = round(time.perf_counter() - t, 1)  # type: ignore[index]
        print(
            f"[{tag}] {name}: "
            + ", ".join(
                f"step {s} acc {ev.metrics['accuracy']:.3f} reward {ev.metrics['reward/total']:.3f}"
                for s, ev in evals.items()
            )
            + f" (before: acc {cold.before.metrics['accuracy']:.3f} "
            f"reward {cold.before.metrics['reward/total']:.3f})",
            flush=True,
        )
    cell["time_s"]["total"] = round(time.perf_counter() - t0, 1)  # type: ignore[index]
    cell["load_average"] = os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(cell, indent=1))
    print(f"[{tag}] wrote {args.out} in {cell['time_s']['total']:.0f} s")  # type: ignore[index]


if __name__ == "__main__":
    main()
