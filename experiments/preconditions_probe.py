"""Issue 45's preconditions, measured on probes of the SFT policy before any RL: is the tool worth
calling at small budgets and not at the dense one, does the prior survive the cold start, and does
greedy decoding still call?

For one seed and one setting of the `prior` task (`--synth`, `--video`, `--cold-steps`,
`--prior-steps`, `--prior-subagents`, `--cold-prior-mix`, `--prior-think`, `--cold-extra`): the
task data, the tool-prior stage and the cold start (`tool_prior_probe.sft_stage`), then, on the
held-out videos, at each overview budget K without gating, under each arm's protocol (`grpo`: no
think prefix, vanilla reward; `para_grpo`: think prefix, PARA-GRPO reward):

- `own`: the SFT policy as it is, at the recipe's temperature, `--samples` episodes a question
  (what the lr-0 control's rollouts are: its leak rate, f_tau, format ok, calls);
- `oracle`: the first turn is the teacher's calling turn (the crops that always contain the
  square: the teacher crops the whole video in equal windows), then the SFT policy goes on
  (its sub-agents report, it answers): what a policy that calls the right windows gets;
- `no_tool`: the first turn starts with the teacher's direct-answer words ("The overview
  shows"), so the policy answers from the overview alone: the no-tool accuracy;
- `greedy`: the SFT policy at temperature 0, one episode a question (does it still call in
  ParaVT's format?).

Also per K: the share of held-out videos whose K-frame overview shows the square at all (from the
frames' timestamps and the video's needle window; a no-tool policy that reads the overview
perfectly reaches shown + (1 - shown) / 4, with 4 colours), and per cell how often a sub-agent's
report is right and how often the answer is a colour a report named. `--summarize JSON ...`
prints the table of `experiments/README.md` with the targets (`TARGETS`) each setting meets.

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 .nox/tests/bin/python experiments/preconditions_probe.py \\
        --seed 0 --work <scratch> --out experiments/results/preconditions/base-s0.json

Nothing here trains an RL arm; the settings it compares are picked on these probes only.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DIRECT_WORDS = "The overview shows"  # how every direct-answer teacher trace begins its think


@dataclass
class DirectAnswer:
    """Wraps an engine: the main agent's first turn starts with the teacher's direct-answer words
    after the runtime's prefix (forced into the prompt, put back in front of the generated text),
    so the policy answers from the overview alone. Everything else goes to `engine` unchanged."""

    engine: Any
    think_prefix: bool

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)

    @property
    def forced(self) -> str:
        from paravt.core.prompts import THINK_PREFIX

        return DIRECT_WORDS if self.think_prefix else THINK_PREFIX + DIRECT_WORDS

    def encode_prompt(self, messages: Sequence[Any], *, assistant_prefix: str = "") -> Any:
        main = any(m.role == "system" and "crop_video" in m.text for m in messages)
        extra = self.forced if main else ""
        return self.engine.encode_prompt(messages, assistant_prefix=assistant_prefix + extra)

    async def generate(self, trajectories: Sequence[Any], sampling: Any) -> list[Any]:
        from paravt.core.engines.scripted import main_turn

        outs = await self.engine.generate(trajectories, sampling)
        for traj, out in zip(trajectories, outs):
            if traj.role == "main" and main_turn(traj) == 1:
                out.text = self.forced + out.text
        return outs


def mean(xs: Sequence[float]) -> float | None:
    return round(sum(xs) / len(xs), 4) if xs else None


def summary(ro: Any) -> dict[str, Any]:
    """One cell: the common measures, accuracy with / without a call, and per-question accuracy
    and calls (for paired differences)."""
    from paravt.train.rl.scoring import episode_metrics

    m = episode_metrics(ro)
    calls = [i for i, ep in enumerate(ro.episodes) if ep.num_tool_calls > 0]
    skips = [i for i, ep in enumerate(ro.episodes) if ep.num_tool_calls == 0]
    per_q: dict[str, dict[str, list[float]]] = {}
    for ep, ex, r in zip(ro.episodes, ro.examples, ro.rewards):
        q = per_q.setdefault(ex.key, {"accuracy": [], "calls": []})
        q["accuracy"].append(r.accuracy)
        q["calls"].append(float(ep.num_tool_calls))
    # the sub-agents' reports: right when a window with the square names its colour and a window
    # without it says "no square"; and whether the main agent answers what a report named
    reports: list[float] = []
    found: list[int] = []  # episodes where some report named the right colour
    for i, (ep, ex) in enumerate(zip(ro.episodes, ro.examples)):
        start, end = ex.extra_info["needle_window_s"]
        colour = str(ex.answer).strip().lower()
        named = False
        for turn in ep.turns:
            for c in turn.calls:
                if not c.executed or c.window_s is None:
                    continue
                text = (c.summary or "").lower()
                inside = c.window_s[0] < end and start < c.window_s[1]
                reports.append(float(colour in text if inside else "no square" in text))
                named = named or (inside and colour in text)
        if named:
            found.append(i)
    examples = [
        {
            "answer": ex.answer,
            "turns": [t.response for t in ep.turns],
            "reports": [c.summary for t in ep.turns for c in t.calls],
        }
        for ep, ex in list(zip(ro.episodes, ro.examples))[:: max(1, len(ro.episodes) // 4)][:4]
    ]
    return {
        "examples": examples,
        "episodes": len(ro.episodes),
        "report_right": mean(reports),
        "reports": len(reports),
        "episodes_report_named_colour": len(found),
        "accuracy_when_report_named_colour": mean([ro.rewards[i].accuracy for i in found]),
        "accuracy": m["accuracy"],
        "kappa": m["kappa"],
        "calling_share": m["tool_use_rate"],
        "f_tau": m["f_tau"],
        "format_ok": m["format_ok"],
        "leak_rate": m["leak_rate"],
        "accuracy_call": mean([ro.rewards[i].accuracy for i in calls]),
        "accuracy_skip": mean([ro.rewards[i].accuracy for i in skips]),
        "metrics": {k: round(v, 4) for k, v in m.items()},
        "per_question": {
            k: {"accuracy": mean(v["accuracy"]), "calls": mean(v["calls"])}
            for k, v in per_q.items()
        },
    }


def oracle_turn(sft_parquet: Path, think_prefix: bool) -> str:
    """The teacher's calling turn (text after the runtime's assistant prefix): the first main-agent
    assistant message that ParaVT's parser reads as valid calls."""
    import pyarrow.parquet as pq

    from paravt.core import parse_response
    from paravt.core.prompts import THINK_PREFIX

    for row in pq.read_table(sft_parquet).to_pylist():
        if row.get("agent") != "main":
            continue
        for m in row["messages"]:
            calls = parse_response(m["content"]).tool_calls if m["role"] == "assistant" else []
            if calls and all(c.ok for c in calls):
                text: str = m["content"]
                return text.removeprefix(THINK_PREFIX) if think_prefix else text
    raise ValueError(f"{sft_parquet}: no teacher trace with a valid calling turn")


def shown(frames: Any, examples: Sequence[Any], k: int) -> float:
    """The share of `examples` whose K-frame overview has a frame inside the needle window."""
    hits = 0
    for ex in examples:
        start, end = ex.extra_info["needle_window_s"]
        overview, _ = frames.overview(ex.video, k)
        hits += any(start <= f.timestamp_s < end for f in overview)
    return hits / len(examples)


# The targets (issue 45, "What to build" 1 and 2), read off each setting's JSON:
TARGETS = {
    "oracle_gap_k2_min": 0.30,  # oracle minus no-tool at K = 2, at least
    "oracle_gap_k8_max": 0.10,  # ... and at the dense K = 8, at most
    "own_k2_over_floor_min": 0.15,  # the SFT policy's own K = 2 accuracy over the no-tool one
    "leak_min": 0.05,  # the lr-0 control's rollouts (vanilla GRPO's protocol at K = 8)
    "f_tau_max": 0.5,  # "well below 1" under sampling (the paper's cold start: 0.13)
}
# How the second registration's task is chosen from these probes (written 2026-11-29, while the
# C7 probes ran and before any of their numbers were read; the earlier settings' numbers were
# known): among the settings probed on seeds 0 and 1, the candidate meets all six targets on both
# seeds (several: the lowest mean f_tau); if none does, the most targets met over the two seeds
# (ties: the lowest mean f_tau). The candidate is then probed on seeds 2 and 3, which no setting
# has been probed on, and the preconditions table reports each target on all four seeds as it
# comes out: a target holds for the task where it holds on every seed; where it does not, the
# table says on how many, and no setting is picked again from seeds 2 and 3.
SELECTION_SEEDS = (0, 1)


def _acc(r: dict[str, Any], cell: str) -> float:
    return float(r["cells"][cell]["accuracy"])


def measures(r: dict[str, Any]) -> dict[str, float]:
    """The numbers the targets read, from one probe's JSON."""
    p = "para_grpo"
    lr0 = r["cells"].get("grpo/k8/own", {})
    greedy = r["cells"][f"{p}/k2/greedy"]
    return {
        "gap_k2": _acc(r, f"{p}/k2/oracle") - _acc(r, f"{p}/k2/no_tool"),
        "gap_k8": _acc(r, f"{p}/k8/oracle") - _acc(r, f"{p}/k8/no_tool"),
        "own_over": _acc(r, f"{p}/k2/own") - _acc(r, f"{p}/k2/no_tool"),
        "leak": lr0.get("leak_rate", float("nan")),
        "f_tau": lr0.get("f_tau", float("nan")),
        "format_ok": lr0.get("format_ok", float("nan")),
        "greedy_calls": greedy["kappa"],
        "greedy_format_ok": greedy["format_ok"],
    }


def targets_met(r: dict[str, Any]) -> list[bool]:
    """Which of the six targets one probe meets, in `TARGETS`' order, greedy calling last."""
    x = measures(r)
    return [
        x["gap_k2"] >= TARGETS["oracle_gap_k2_min"],
        x["gap_k8"] <= TARGETS["oracle_gap_k8_max"],
        x["own_over"] >= TARGETS["own_k2_over_floor_min"],
        x["leak"] >= TARGETS["leak_min"],
        x["f_tau"] <= TARGETS["f_tau_max"],
        x["greedy_calls"] > 0 and x["greedy_format_ok"] >= 0.9,
    ]


def select(paths: Sequence[Path]) -> str:
    """The candidate by the selection rule above, from probes named `<setting>-s<seed>.json`."""
    by_setting: dict[str, dict[int, dict[str, Any]]] = {}
    for path in paths:
        r = json.loads(path.read_text(encoding="utf-8"))
        setting = path.stem.rsplit("-s", 1)[0]
        by_setting.setdefault(setting, {})[int(r["seed"])] = r
    scored = []
    for setting, seeds in by_setting.items():
        if not all(s in seeds for s in SELECTION_SEEDS):
            continue
        met = [sum(targets_met(seeds[s])) for s in SELECTION_SEEDS]
        f_tau = sum(measures(seeds[s])["f_tau"] for s in SELECTION_SEEDS) / len(SELECTION_SEEDS)
        scored.append((-sum(met), f_tau, setting, met))
    if not scored:
        raise SystemExit(f"no setting was probed on every seed of {SELECTION_SEEDS}")
    scored.sort()
    lines = [
        f"{name}: targets met {met} on seeds {SELECTION_SEEDS}, mean f_tau {f:.3f}"
        for _, f, name, met in scored
    ]
    return "\n".join([f"candidate: {scored[0][2]}", *lines])


def preconditions_table(paths: Sequence[Path]) -> str:
    """The preconditions of one setting, a row per seed and how many seeds meet each target."""
    names = ["oracle - no-tool K=2", "oracle - no-tool K=8", "own - no-tool K=2", "leak (lr-0)"]
    names += ["f_tau (lr-0)", "greedy K=2 calls"]
    t = TARGETS
    bounds = [f">= {t['oracle_gap_k2_min']:g}", f"<= {t['oracle_gap_k8_max']:g}"]
    bounds += [f">= {t['own_k2_over_floor_min']:g}", f">= {t['leak_min']:g}"]
    bounds += [f"<= {t['f_tau_max']:g}", "> 0, format ok >= 0.9"]
    lines = ["| seed | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    lines.append("| target | " + " | ".join(bounds) + " |")
    held = [0] * len(names)
    for path in paths:
        r = json.loads(path.read_text(encoding="utf-8"))
        x = measures(r)
        met = targets_met(r)
        held = [h + int(m) for h, m in zip(held, met, strict=True)]
        cells = [f"{x['gap_k2']:+.3f}", f"{x['gap_k8']:+.3f}", f"{x['own_over']:+.3f}"]
        cells += [f"{x['leak']:.3f}", f"{x['f_tau']:.2f}", f"{x['greedy_calls']:.2f}"]
        marked = [c if m else f"**{c}** (missed)" for c, m in zip(cells, met, strict=True)]
        lines.append(f"| {r['seed']} | " + " | ".join(marked) + " |")
    lines.append("| holds on | " + " | ".join(f"{h} of {len(paths)}" for h in held) + " |")
    return "\n".join(lines)


def table(paths: Sequence[Path]) -> str:
    """One line per setting (JSON): the preconditions' numbers and which targets hold."""
    head = (
        "| setting | seed | shown K=2 / 8 | reports right | answer = a named colour | "
        "oracle K=2 | no-tool K=2 | gap K=2 | oracle K=8 | no-tool K=8 | gap K=8 | "
        "own K=2 (calls) | own - no-tool K=2 | leak (lr-0, K=8; PARA K=8) | "
        "f_tau, format ok (lr-0) | greedy K=2 calls, format ok | targets met |"
    )
    lines = [head, "|" + "---|" * 17]
    for path in paths:
        r = json.loads(path.read_text(encoding="utf-8"))
        p = "para_grpo"
        x = measures(r)
        own = r["cells"][f"{p}/k2/own"]
        oracle = r["cells"][f"{p}/k2/oracle"]
        para_leak = r["cells"][f"{p}/k8/own"]["leak_rate"]
        met = targets_met(r)
        lines.append(
            f"| {path.stem} | {r['seed']} | {r['shown']['k2']:.2f} / {r['shown']['k8']:.2f} | "
            f"{oracle['report_right']:.2f} | {oracle['accuracy_when_report_named_colour']:.2f} | "
            f"{_acc(r, f'{p}/k2/oracle'):.3f} | {_acc(r, f'{p}/k2/no_tool'):.3f} | "
            f"{x['gap_k2']:+.3f} | {_acc(r, f'{p}/k8/oracle'):.3f} | "
            f"{_acc(r, f'{p}/k8/no_tool'):.3f} | {x['gap_k8']:+.3f} | "
            f"{own['accuracy']:.3f} ({own['kappa']:.2f}) | {x['own_over']:+.3f} | "
            f"{x['leak']:.3f}; {para_leak:.3f} | {x['f_tau']:.2f}, {x['format_ok']:.2f} | "
            f"{x['greedy_calls']:.2f}, {x['greedy_format_ok']:.2f} | "
            f"{sum(met)} of 6 ({''.join('y' if y else '-' for y in met)}) |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--summarize", nargs="+", type=Path, help="print the table of these JSONs")
    ap.add_argument(
        "--preconditions",
        nargs="+",
        type=Path,
        help="the preconditions table of one setting: these JSONs, a row per seed",
    )
    ap.add_argument(
        "--select",
        nargs="+",
        type=Path,
        help="apply the selection rule (SELECTION_SEEDS) to these JSONs, named <setting>-s<seed>",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work", type=Path, help="scratch directory (reused)")
    ap.add_argument("--out", type=Path, help="JSON results")
    ap.add_argument("--cold-steps", type=int, default=None, help="default: the task's")
    ap.add_argument("--prior-steps", type=int, default=None, help="default: the task's")
    ap.add_argument("--synth", nargs="*", default=[], help="extra data.synth overrides")
    ap.add_argument("--video", nargs="*", default=[], help="extra video overrides (SFT and RL)")
    ap.add_argument("--rollout", nargs="*", default=[], help="extra RL recipe overrides")
    ap.add_argument("--prior-think", action="store_true")
    ap.add_argument(
        "--prior-subagents",
        action="store_true",
        help="the tool-prior stage also trains on the sub-agents' teacher rows: the prior model "
        "can already describe frames, as a pretrained VLM can; only its calling habit differs",
    )
    ap.add_argument(
        "--cold-prior-mix",
        type=float,
        default=0.0,
        help="this share of the prior's calling traces (main agent, every K) joins the cold "
        "start's data, as a pretrained model's habits stay in what it is fine-tuned beside "
        "(above 1 they repeat: more prior data)",
    )
    ap.add_argument("--cold-extra", nargs="*", default=[], help="cold-start recipe overrides")
    ap.add_argument("--ks", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--samples", type=int, default=4, help="episodes per question (sampled)")
    ap.add_argument("--prompts", type=int, default=32, help="held-out questions")
    ap.add_argument("--protocols", nargs="+", default=["para_grpo", "grpo"])
    ap.add_argument(
        "--modes",
        nargs="+",
        default=["own", "oracle", "no_tool", "greedy"],
        choices=["own", "oracle", "no_tool", "greedy"],
    )
    args = ap.parse_args()
    if args.summarize:
        print(table(args.summarize))
        return
    if args.select:
        print(select(args.select))
        return
    if args.preconditions:
        print(preconditions_table(args.preconditions))
        return
    if args.work is None or args.out is None:
        ap.error("--work and --out are required (or --summarize JSON ...)")

    from tool_prior_probe import sft_stage  # the same stages as the prior probes

    from paravt.core.engines import HFEngine
    from paravt.core.engines.scripted import ScriptedTurns
    from paravt.core.tiny import build_tiny_qwen3vl
    from paravt.train import load_rl_examples
    from paravt.train import miniature as m
    from paravt.train.frames import FrameSource
    from paravt.train.modeling import load_model_and_processor, pick_device
    from paravt.train.rl.rollouts import rollout
    from paravt.train.rl.run import build_gate, build_reward_config
    from paravt.train.rl.scoring import score_rollouts

    task = m.TASKS["prior"]
    task = m.Task(
        **{
            **task.__dict__,
            "synth": (*task.synth, *args.synth),
            "video": (*task.video, *args.video),
            "prior_think": task.prior_think or args.prior_think,
            "prior_subagents": args.prior_subagents,
            "cold_prior_mix": args.cold_prior_mix,
        }
    )
    prior_steps = task.prior_steps if args.prior_steps is None else args.prior_steps
    cold_steps = task.sft_steps if args.cold_steps is None else args.cold_steps
    # the data folder is named by the settings that shape it, so settings never share one
    data_tag = hashlib.sha1(json.dumps([task.synth, task.prior_think]).encode()).hexdigest()[:8]
    work = args.work
    data = m.make_task_data(
        work / f"data-{data_tag}", sft_budgets=task.sft_k, seed_offset=args.seed, task=task
    )
    run_tag = hashlib.sha1(
        json.dumps(
            [
                data_tag,
                task.video,
                prior_steps,
                cold_steps,
                args.cold_extra,
                args.prior_subagents,
                args.cold_prior_mix,
            ]
        ).encode()
    ).hexdigest()[:8]
    root = work / f"s{args.seed}"
    base = root / "base"
    if not (base / "config.json").is_file():
        build_tiny_qwen3vl(base, seed=args.seed)
    quiet = ["logging.progress=false"]
    t_start = time.perf_counter()

    def sft(out: Path, init: Path, steps: int, prior: bool, extra: Sequence[str] = ()) -> Path:
        return sft_stage(
            out,
            init,
            data,
            task,
            seed=args.seed,
            steps=steps,
            prior=prior,
            extra=[*quiet, *extra],
        )

    prior_tag = f"prior-{data_tag}-{prior_steps}"
    if args.prior_subagents:  # the prior stage also learns the sub-agents' reports (perception)
        prior_tag += "-sub"
    prior_model = sft(root / prior_tag, base, prior_steps, True) if prior_steps else base
    # the cold start: the teacher traces, with the task's share of the prior's calling traces
    cold_extra = list(args.cold_extra)
    policy = sft(root / f"cold-{run_tag}", prior_model, cold_steps, False, cold_extra)
    t_sft = time.perf_counter() - t_start

    def recipe_for(protocol: str, k: int, samples: int, extra: Sequence[str] = ()) -> Any:
        return m.rl_recipe(
            root / "probe",
            policy,
            data.held_out,
            arm=m.ARMS[protocol],
            task=task,
            seed=args.seed,
            steps=1,
            extra=[
                *quiet,
                "gating.enabled=false",
                f"video.overview_frames={k}",
                f"rollout.group_size={samples}",
                *args.rollout,
                *extra,
            ],
        )

    first = recipe_for(args.protocols[0], args.ks[0], 1)
    held = load_rl_examples(first)[: args.prompts]
    frames = FrameSource(first.video)
    device = pick_device(first.distributed.device)
    net, processor = load_model_and_processor(first.model, device, path=policy)
    hf = HFEngine(net, processor)
    results: dict[str, Any] = {
        "seed": args.seed,
        "task": task.summary,
        "synth": list(task.synth),
        "video": list(task.video),
        "rollout": list(args.rollout),
        "prior_steps": prior_steps,
        "prior_think": task.prior_think,
        "prior_subagents": args.prior_subagents,
        "cold_steps": cold_steps,
        "cold_extra": list(args.cold_extra),
        "cold_prior_mix": args.cold_prior_mix,
        "questions": len(held),
        "samples": args.samples,
        "temperature": first.rollout.temperature,
        "sft_seconds": round(t_sft, 1),
        "load_before": os.getloadavg(),
        "shown": {f"k{k}": shown(frames, held, k) for k in args.ks},
        "cells": {},
    }
    for protocol in args.protocols:
        for k in args.ks:
            for mode in args.modes:
                greedy = mode == "greedy"
                recipe = recipe_for(
                    protocol,
                    k,
                    1 if greedy else args.samples,
                    ["rollout.temperature=0"] if greedy else [],
                )
                engine: Any = hf
                if mode == "oracle":
                    sft_k = data.sft.get(k) or next(iter(data.sft.values()))
                    engine = ScriptedTurns(hf, {1: oracle_turn(sft_k, recipe.rollout.think_prefix)})
                elif mode == "no_tool":
                    engine = DirectAnswer(hf, recipe.rollout.think_prefix)
                t0 = time.perf_counter()
                ro = rollout(held, engine, frames, build_gate(recipe), recipe, epoch=0, seed=12345)
                score_rollouts(ro, build_reward_config(recipe), recipe)
                cell = summary(ro)
                cell["seconds"] = round(time.perf_counter() - t0, 1)
                results["cells"][f"{protocol}/k{k}/{mode}"] = cell
                print(
                    f"{protocol} K={k} {mode}: acc {cell['accuracy']:.3f} kappa {cell['kappa']:.2f}"
                    f" reports right {cell['report_right']} acc|named {cell['accuracy_when_report_named_colour']}"
                    f" leak {cell['leak_rate']:.3f} f_tau {cell['f_tau']:.2f} format_ok "
                    f"{cell['format_ok']:.2f} acc call/skip {cell['accuracy_call']}/"
                    f"{cell['accuracy_skip']} ({cell['seconds']:.0f} s)",
                    flush=True,
                )
    results["load_after"] = os.getloadavg()
    results["seconds"] = round(time.perf_counter() - t_start, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
