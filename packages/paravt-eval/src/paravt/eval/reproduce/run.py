"""`run_reproduce`: train what is missing, measure what is missing, write the report.

Order of work (each step cached, see `training` and `cells`): the task data; per seed the base
model, the SFT cold start, the RL arms the blocks need; per seed the base and SFT rollout stats,
every checkpoint's held-out accuracy at each overview budget K (greedy, and `eval_samples`
episodes per question sampled at the rollout temperature), and (block C) the PARA-GRPO
checkpoint with sequential dispatch. Then `OUT/tables.md` (setup, Table 2 blocks, settle steps,
times, the results section), `OUT/tables.json` (every number per seed, curves included) and
`OUT/curves.png`.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paravt.eval.reproduce.cells import (
    accuracy_cell,
    held_out_documents,
    protocol_source,
    rollout_stats_cell,
    settle_step,
    settled,
    training_curves,
)
from paravt.eval.reproduce.chart import draw_chart
from paravt.eval.reproduce.claims import render_results
from paravt.eval.reproduce.config import ReproduceConfig
from paravt.eval.reproduce.paper import run_paper_splits
from paravt.eval.reproduce.progress import log, restart_clock
from paravt.eval.reproduce.registration import registration
from paravt.eval.reproduce.rules import JUDGED_TASKS
from paravt.eval.reproduce.rules import render_results as render_ruled_results
from paravt.eval.reproduce.tables import LABELS, Row, Summary, mean_sd, render_tables
from paravt.eval.reproduce.training import (
    arms_for,
    ensure_data,
    ensure_seed,
    rl_recipe_for_stats,
    steps_of,
)


@dataclass
class ReproduceResult:
    markdown_path: Path
    json_path: Path
    chart_path: Path | None
    summary: Summary | None


def _quiet_transformers() -> None:
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    except ImportError:  # pragma: no cover - transformers comes with paravt-core[hf]
        pass


def run_reproduce(config: ReproduceConfig, *, report: bool = True) -> ReproduceResult:
    """Fill every cell the config asks for (reusing finished ones) and write the report
    (`report=False`: only fill the cells, as a worker of `jobs > 1` does)."""
    restart_clock()
    out = config.out
    out.mkdir(parents=True, exist_ok=True)
    _quiet_transformers()
    t0 = time.perf_counter()
    if config.paper_splits:
        md = out / "table1.md"
        md.write_text("\n".join(run_paper_splits(out, config.checkpoints, config.device)) + "\n")
        return ReproduceResult(md, md, None, None)

    data = ensure_data(config)
    docs = held_out_documents(data.held_out)
    arms = arms_for(config.blocks, config.task)
    protocol_dir = out / "protocol"
    if not (protocol_dir / "agent_protocol.json").is_file():
        # the PARA-GRPO arm's protocol: base and SFT rows are evaluated under it (it holds
        # settings only, not weights, so the first seed's recipe stands for every seed)
        # lazy: the optional extra paravt-eval[train]
        from paravt.train import trained_protocol

        seed = config.seeds[0]
        first = rl_recipe_for_stats(config, seed, out / f"seed{seed}" / "sft" / "final", data)
        trained_protocol(first).save(protocol_dir)
    if config.jobs > 1 and len(config.seeds) > 1:
        _seeds_in_parallel(config)
    rows = {name: Row(name) for name in ("base", "sft", *arms)}
    sequential = Row("para_grpo_sequential") if "C" in config.blocks else None
    compute_s = 0.0  # training and measuring time of every run and cell, reused ones included
    identical: dict[int, list[list[str]]] = {}  # seed -> arms with the same answer to every doc
    for seed in config.seeds:
        runs = ensure_seed(config, seed, data, arms)
        compute_s += sum(runs.seconds.values())
        stats_recipe = rl_recipe_for_stats(config, seed, runs.sft, data)
        for name in ("base", "sft"):
            stats = rollout_stats_cell(config, seed, name, runs.checkpoint(name), stats_recipe)
            compute_s += stats.get("seconds", 0.0)
            rows[name].f_tau.append(stats["f_tau"])
            rows[name].kappa.append(stats["kappa"])
            rows[name].format_ok.append(stats.get("format_ok"))
            rows[name].leak_rate.append(stats.get("leak_rate"))
            rows[name].invalid_calls.append(stats.get("tool/invalid_calls"))
        rows["sft"].train_seconds.append(runs.seconds["sft"])
        for name in arms:
            curves = training_curves(out / f"seed{seed}" / name)
            row = rows[name]
            row.curves.append(curves)
            kappa = settled(curves["kappa"])
            row.f_tau.append(settled(curves["f_tau"]))
            row.kappa.append(kappa)
            row.format_ok.append(settled(curves["format_ok"]))
            row.leak_rate.append(settled(curves["leak_rate"]))
            row.invalid_calls.append(settled(curves["tool/invalid_calls"]))
            row.settle_step.append(settle_step(curves["kappa"], max(0.1, 0.1 * abs(kappa))))
            row.train_seconds.append(runs.seconds[name])
        targets: list[tuple[Row, Path, str]] = [
            (rows[name], runs.checkpoint(name), "parallel") for name in rows
        ]
        if sequential is not None:
            targets.append((sequential, runs.checkpoint("para_grpo"), "sequential"))
        answers: dict[str, list[float]] = {}
        for row, ckpt, dispatch in targets:
            protocol = protocol_source(ckpt, protocol_dir)
            calls = []
            model = "para_grpo" if row is sequential else row.model
            for k in config.eval_budgets:
                cell = accuracy_cell(
                    config, seed, model, ckpt, k, docs, protocol, dispatch=dispatch
                )
                row.accuracy.setdefault(k, []).append(cell["accuracy"])
                row.per_doc.setdefault(k, []).append(cell["per_doc"])
                row.eval_kappa.setdefault(k, []).append(cell["kappa"])
                compute_s += cell.get("seconds", 0.0)
                calls.append(cell["kappa"])
                if row is not sequential:
                    answers.setdefault(model, []).extend(cell["per_doc"])
                if config.eval_samples:  # sequential too: C1 reads the sampled column
                    cell = accuracy_cell(
                        config,
                        seed,
                        model,
                        ckpt,
                        k,
                        docs,
                        protocol,
                        dispatch=dispatch,
                        samples=config.eval_samples,
                    )
                    row.sampled.setdefault(k, []).append(cell["accuracy"])
                    row.sampled_kappa.setdefault(k, []).append(cell["kappa"])
                    row.sampled_per_doc.setdefault(k, []).append(cell["per_doc"])
                    compute_s += cell.get("seconds", 0.0)
            row.eval_calls.append(sum(calls) / len(calls))
        identical[seed] = same_answers(answers)
    if not report:
        return ReproduceResult(out / "tables.md", out / "tables.json", None, None)
    summary = Summary(
        seeds=list(config.seeds),
        budgets=list(config.eval_budgets),
        rows=rows,
        sequential=sequential,
        setup={
            **_setup(config, len(docs)),
            "compute_minutes": round(compute_s / 60, 1),
            "identical_answers": identical,
        },
        seconds=time.perf_counter() - t0,
    )
    md = out / "tables.md"
    md.write_text(render_report(summary, config), encoding="utf-8")
    js = out / "tables.json"
    js.write_text(json.dumps(summary.to_json(), indent=1) + "\n", encoding="utf-8")
    chart = draw_chart(summary, out / "curves.png")
    log(f"wrote {md}, {js}, {chart}")
    return ReproduceResult(md, js, chart, summary)


def _one_seed(config: ReproduceConfig, seed: int) -> None:
    """A worker process: train and measure one seed (everything lands in cached files)."""
    import multiprocessing as mp

    # a spawned worker inherits "spawn" as its start method; the trainers' data loaders start
    # their own workers with the platform's default (fork on Linux), as in a top-level run
    mp.set_start_method(mp.get_all_start_methods()[0], force=True)
    one = config.model_copy(update={"seeds": (seed,), "jobs": 1})
    run_reproduce(one, report=False)


def _seeds_in_parallel(config: ReproduceConfig) -> None:
    """Train and measure the seeds `config.jobs` at a time, one process each (torch one thread
    each); the caller then reads every run and cell back from the cache."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    log(f"{len(config.seeds)} seeds, {config.jobs} at a time (one process each)")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with ProcessPoolExecutor(config.jobs, mp_context=mp.get_context("spawn")) as pool:
        for _ in pool.map(_one_seed, [config] * len(config.seeds), config.seeds):
            pass


def same_answers(answers: dict[str, list[float]]) -> list[list[str]]:
    """Groups of two or more RL arms whose per-document scores match on every held-out question
    at every K (right and wrong on the same questions), so their differences in that seed are 0."""
    groups: dict[tuple[float, ...], list[str]] = {}
    for model, scores in answers.items():
        if model not in ("base", "sft"):
            groups.setdefault(tuple(scores), []).append(model)
    return [g for g in groups.values() if len(g) > 1]


def _setup(config: ReproduceConfig, n_docs: int) -> dict[str, Any]:
    # lazy: the optional extra paravt-eval[train]
    from paravt.train import miniature as m

    task = m.TASKS[config.task]
    arms = {a.name: a.describe(task) for a in m.ARMS.values()}
    prior_steps, sft_steps = steps_of(config)
    return {
        "task": config.task,
        "task_summary": task.summary,
        "seeds": list(config.seeds),
        "blocks": list(config.blocks),
        "prior_steps": prior_steps,
        "sft_steps": sft_steps,
        "rl_steps": config.rl_steps,
        "rl_batch": f"4 prompts x 8 rollouts, temperature 0.7, lr {m.LR:g}, 3 turns, 5 calls/turn",
        "tool_fraction": _synth_value([*m.SYNTH, *task.synth], "tool_fraction", 0.5),
        "gate": list(task.gate),
        "sft_k": list(task.sft_k),
        "fixed_k": task.fixed_k,
        "jobs": config.jobs,
        "gamma": m.TABLE2_GAMMA,
        "arms": arms,
        "held_out_documents": n_docs,
        "sft_videos": config.n_sft_videos,
        "rl_videos": config.n_rl_videos,
        "stats_prompts": config.stats_prompts,
        "eval_samples": config.eval_samples,
        "eval_temperature": config.eval_temperature,
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
    }


def _synth_value(overrides: Sequence[str], key: str, fallback: float) -> float:
    """The last `data.synth.<key>=v` value of `overrides` (in the order they are applied)."""
    values = [o.split("=", 1)[1] for o in overrides if o.startswith(f"data.synth.{key}=")]
    return float(values[-1]) if values else fallback


def _calling_share(st: dict[str, Any]) -> str:
    """The share of teacher traces that call, in words: the task's `tool_fraction` (recorded in
    the setup since issue 45; half in the tables written before, and on every other task)."""
    share = float(st.get("tool_fraction", 0.5))
    return {0.5: "half", 0.75: "three quarters"}.get(share, f"a share {share:g}")


def _task_lines(st: dict[str, Any]) -> list[str]:
    if st.get("task") == "prior":
        return [
            "- Task (paravt-tools synth, layout `single`): a 16 s video shows one coloured square "
            "for 1.5 s; 'What colour is the square?'. The dense K = 8 overview (a frame every 2 s) "
            "shows it in about 3 of 4 videos, K = 4 in about 3 of 8, K = 2 in about 1 of 5; two "
            "parallel crops of 8 frames over the halves of the video always find it. A call costs "
            "nothing but its format, the same at every budget and for every arm.",
        ]
    return [
        "- Task (paravt-tools synth, layout `single`): a 16 s video shows one coloured square "
        "for 2 s; 'What colour is the square?'. At K = 8 overview frames the overview always "
        "shows it (the tool is unnecessary); at K = 2 or 4 it usually misses it; two parallel "
        "crops over the halves of the video always find it.",
    ]


def render_report(s: Summary, config: ReproduceConfig) -> str:
    st = s.setup
    gate = st["gate"]
    lines = [
        "# ParaVT Table 2 in miniature",
        "",
        "A 1 M-parameter tiny Qwen3-VL on a synthetic task, trained and evaluated on a CPU: it "
        "shows which of the paper's mechanisms appear at this scale, not the paper's numbers.",
        "",
        "## Setup",
        "",
        *_task_lines(st),
        f"- Task variant `{st.get('task', 'plain')}`: {st.get('task_summary', 'no context limit')}"
        " (the same for every arm and every evaluation).",
        f"- Seeds {st['seeds']}: each seed is its own untrained tiny model (weights and tokenizer) "
        "and its own SFT and RL sampling; the videos are the same for every seed. Mean ± sd over "
        "seeds; differences are paired by seed.",
        (
            f"- Tool prior: {st['prior_steps']} SFT steps on the same videos' traces written the "
            "way a pretrained reasoning VLM uses tools (direct answers in think -> answer tags; "
            "calls in the leaked `<tool_code>crop_video(...)</tool_code>` form with no think and "
            "an untagged answer after them), before the cold start."
            if st.get("prior_steps")
            else "- No tool prior: the cold start begins from the untrained model."
        ),
        f"- SFT cold start: {st['sft_steps']} steps on teacher traces of {st['sft_videos']} videos at "
        f"every K in {st['sft_k']} ({_calling_share(st)} of them call the tool).",
        f"- RL: {st['rl_steps']} steps per arm, {st['rl_batch']}, on {st['rl_videos']} other "
        f"videos. Gated arms draw K from {gate} per prompt; the others see K = {st['fixed_k']}, "
        "the dense budget (the analogue of the paper's non-gated runs at 64 frames). Arms: "
        + "; ".join(f"{LABELS.get(n, n)}: {d}" for n, d in st["arms"].items() if n in s.rows)
        + ".",
        "- f_tau: mean training format reward at temperature 0.7 (each run's own reward, so "
        "it can read high while the calls are invalid); beside it: invalid calls / ep (invalid "
        "tool-call attempts per rollout, as the reward counts them), format ok (the share of "
        "rollouts whose structural blocks all parse, the same measure for every arm) and leak "
        "(the share with a tool-prior leak); kappa: mean executed crop_video calls per rollout. "
        "RL rows: the mean of the last 5 training steps; base and SFT rows: "
        f"{st['stats_prompts']} training prompts x 8 rollouts "
        "under the full PARA-GRPO arm's settings (what its first step sees).",
        f"- Accuracy: {st['held_out_documents']} held-out videos (neither SFT's nor RL's) per "
        "column, greedy, each checkpoint under the protocol it was trained with (its "
        "agent_protocol.json; base and SFT: the PARA-GRPO recipe's) at overview budget K, "
        "scored by normalised exact match (else token F1) against the colour word.",
        "",
        "## Table 2 in miniature",
        "",
        *render_tables(s),
    ]
    settle = [
        (LABELS.get(n, n), r.settle_step)
        for n, r in s.rows.items()
        if r.settle_step and any(x is not None for x in r.settle_step)
    ]
    if settle:
        lines += [
            "RL steps until kappa settles (the 5-step moving average stays within 10% (at least "
            "0.1) of its final value), per seed: "
            + "; ".join(f"{name} {steps}" for name, steps in settle)
            + ".",
            "",
        ]
    same = {seed: g for seed, g in st.get("identical_answers", {}).items() if g}
    if same:
        lines += [
            "Arms scoring the same on every held-out question at every K (right and wrong on "
            "the same questions, so their paired differences in that seed are 0): "
            + "; ".join(
                f"seed {seed}: " + ", ".join("{" + ", ".join(g) + "}" for g in groups)
                for seed, groups in same.items()
            )
            + ".",
            "",
        ]
    times = [
        f"{LABELS.get(n, n)} {mean_sd(r.train_seconds)[0]:.0f} s"
        for n, r in s.rows.items()
        if r.train_seconds
    ]
    lines += [
        f"Time: {st['compute_minutes']:.1f} min of training and measuring in all (every run and "
        f"cell, as recorded when it ran); this invocation {s.seconds / 60:.1f} min (finished runs "
        "and cells are reused); "
        f"training time per run (mean over seeds): {', '.join(times)}; load average at the end "
        f"{', '.join(map(str, st['load_average_at_end']))}.",
        "",
        *(
            render_ruled_results(s, rules_commit=registration())
            if st.get("task") in JUDGED_TASKS
            else render_results(s)
        ),
        "Files: tables.json (every number per seed, the curves included), curves.png, "
        "cells/ (one JSON per measurement), seed*/ (checkpoints and metrics.jsonl per run).",
    ]
    return "\n".join(lines) + "\n"
