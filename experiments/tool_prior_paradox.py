"""The Tool Prior Paradox in miniature: is there a task setting where vanilla GRPO's tool use
collapses while PARA-GRPO's does not?

In the paper, vanilla GRPO after the SFT cold start drives the tool-call rate kappa from 2.50 to
0.02 (the Tool Necessity Gap: with a 64-frame overview, calling and skipping earn the same; and
Format Fragility: structural tags break under temperature-0.7 sampling), while PARA-GRPO
(exploration anchoring + nFrames gating) keeps it at 0.21. In `paravt-eval reproduce` vanilla
GRPO *raises* kappa instead (0.68 -> 1.56): a call never fails there and R_tool pays for it.

For one task setting and one seed this script builds the task data (`paravt.train.miniature`,
SFT traces at K = 2, 4 and 8 as reproduce), runs the SFT cold start once, then

- `--probe`: the SFT policy's rollouts on the RL prompts under each arm's recipe, without any
  update: kappa, f_tau, and the reward, accuracy and mean GRPO advantage of the episodes with an
  executed call, with a broken attempt (a tool tag written, no call ran) and with no attempt (a
  positive mean advantage of calling episodes is what makes GRPO raise kappa). Cheap (10-20 s per
  arm); used to pick settings by measurement.
- otherwise: vanilla GRPO (`ARMS["grpo"]`: no anchoring, reward preset vanilla, no gating, fixed
  K = `TABLE2_FIXED_K`) and PARA-GRPO (`ARMS["para_grpo"]`: think prefix, preset paragrpo, gate
  over `TABLE2_GATE`, gamma) from that same checkpoint, with per-step kappa / f_tau / accuracy /
  truncation curves from each run's metrics.jsonl, and held-out accuracy, kappa and f_tau of the
  SFT policy and of each arm's final policy at fixed overview budgets (sampled at the rollout
  temperature, each policy under its own arm's protocol).

A setting is a set of overrides shared by both arms: `--synth` (SynthConfig knobs of the task data,
appended to `miniature.SYNTH`), `--rollout` (recipe overrides of both RL arms, e.g.
`rollout.max_new_tokens=48`, `rollout.temperature=1.0`) and `--sft-steps`. The arms differ only by
what defines them (`Arm.overrides()`).

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 .nox/tests/bin/python experiments/tool_prior_paradox.py \\
        --name reproduce --seed 0 --out experiments/results/tool_prior_paradox/reproduce-s0.json

    .nox/tests/bin/python experiments/tool_prior_paradox.py --summarize \\
        experiments/results/tool_prior_paradox/*-s[0-9].json      # the per-seed table

Task data and SFT checkpoints are cached under `--work` (keyed by the setting and seed). Measured
settings, numbers and reading: experiments/README.md, "The Tool Prior Paradox in miniature".
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

ARM_NAMES = ("grpo", "para_grpo")
EVAL_BUDGETS = (2, 8)  # the overview usually misses the square at 2, always shows it at 8
EVAL_GROUP = 4  # held-out episodes per prompt
CURVE_KEYS = (
    "kappa",
    "f_tau",
    "tool_use_rate",
    "accuracy",
    "reward/total",
    "truncated_rate",
    "len/main_generated",
)


def _key(*parts: Any) -> str:
    return hashlib.sha1(json.dumps(parts).encode()).hexdigest()[:8]


def _load() -> str:
    return "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def cold(work: Path, seed: int, synth: list[str], sft_steps: int, sizes: dict[str, int]) -> Any:
    """Task data and the SFT checkpoint for (setting, seed), cached; (data, sft_model, seconds)."""
    import paravt.train.miniature as m
    from paravt.core.testing import cached_tiny_qwen3vl
    from paravt.train.sft import train_sft

    m.SYNTH = [*m.SYNTH, *synth]  # later overrides win
    root = work / f"data-{_key(synth, sizes)}-s{seed}"
    data = m.make_task_data(root, sft_budgets=m.TABLE2_SFT_K, seed_offset=seed, **sizes)
    sft_dir = work / f"sft-{_key(synth, sizes, sft_steps)}-s{seed}"
    done = sft_dir / "done.json"
    if done.is_file():
        return data, sft_dir / "final", json.loads(done.read_text())["seconds"]
    recipe = m.sft_recipe(
        sft_dir,
        cached_tiny_qwen3vl(seed=0),
        data,
        seed=seed,
        steps=sft_steps,
        extra=["logging.progress=false"],
    )
    t0 = time.perf_counter()
    final = train_sft(recipe)
    seconds = round(time.perf_counter() - t0, 1)
    done.write_text(json.dumps({"seconds": seconds}) + "\n")
    return data, Path(final), seconds


def arm_recipe(out: Path, init: Path, parquet: Path, arm: str, seed: int, steps: int, extra: list):
    import paravt.train.miniature as m

    return m.rl_recipe(
        out,
        init,
        parquet,
        arm=m.ARMS[arm],
        seed=seed,
        steps=steps,
        extra=["logging.progress=false", *extra],
    )


def probe(model: Path, recipe: Any, examples: list[Any]) -> dict[str, float]:
    """Rollouts of `model` under `recipe` without an update: what GRPO's first step would see."""
    import paravt.train.miniature as m
    from paravt.train.rl import episode_metrics

    ro = m.scored_rollouts(model, recipe, examples)
    out = {k: episode_metrics(ro).get(k, float("nan")) for k in CURVE_KEYS}
    # call: a call was executed; broken: a call was attempted (a tool tag written) and none ran;
    # skip: no attempt. GRPO reinforces the attempt, so broken attempts count against calling.
    kind = [
        "call"
        if ep.num_tool_calls > 0
        else "broken"
        if ep.num_call_attempts > 0 or any("<tool_c" in t.response for t in ep.turns)
        else "skip"
        for ep in ro.episodes
    ]
    called = [k != "skip" for k in kind]

    def mean(xs: list[float]) -> float:
        return statistics.fmean(xs) if xs else float("nan")

    for tag in ("call", "broken", "skip"):
        idx = [i for i, k in enumerate(kind) if k == tag]
        out[f"n_{tag}"] = len(idx)
        out[f"reward_{tag}"] = mean([ro.rewards[i].total for i in idx])
        out[f"acc_{tag}"] = mean([ro.rewards[i].accuracy for i in idx])
        out[f"fmt_{tag}"] = mean([ro.rewards[i].format for i in idx])
        out[f"adv_{tag}"] = mean([ro.advantages[i] for i in idx])
    g = recipe.rollout.group_size
    mixed = [called[i : i + g] for i in range(0, len(called), g)]
    out["mixed_groups"] = sum(0 < sum(x) < g for x in mixed) / max(1, len(mixed))
    return out


def held_out(model: Path, recipe: Any, held: list[Any], k: int) -> dict[str, Any]:
    """`model` on the held-out prompts at overview budget `k` (no gate), `EVAL_GROUP` episodes
    each at the rollout temperature: means over prompts with their standard errors."""
    import paravt.train.miniature as m

    fixed = recipe.model_copy(
        update={
            "gating": recipe.gating.model_copy(update={"enabled": False}),
            "video": recipe.video.model_copy(update={"overview_frames": k}),
            "rollout": recipe.rollout.model_copy(update={"group_size": EVAL_GROUP}),
        }
    )
    ev = m.evaluate_held_out(model, fixed, held)
    res: dict[str, Any] = {"prompts": len(ev.per_prompt), "episodes_per_prompt": EVAL_GROUP}
    for key in m.SCORES:
        mu, se = ev.mean_se(key)
        res[key] = [round(mu, 4), round(se, 4)]
    res["kappa"] = round(ev.metrics["kappa"], 4)
    res["f_tau"] = round(ev.metrics["f_tau"], 4)
    res["truncated_rate"] = round(ev.metrics["truncated_rate"], 4)
    return res


def curves(run: Path) -> dict[str, list[float]]:
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    rows = [r for r in rows if "kappa" in r]
    return {k: [round(float(r.get(k, float("nan"))), 4) for r in rows] for k in CURVE_KEYS}


def _ends(values: list[float], n: int = 5) -> tuple[float, float]:
    """Mean of the first and of the last `n` steps."""
    return statistics.fmean(values[:n]), statistics.fmean(values[-n:])


def summarize(paths: list[Path]) -> str:
    """A markdown table of finished runs: kappa and f_tau over the first and last 5 RL steps
    (mean, and min..max of those steps), held-out accuracy and kappa of SFT -> final per arm."""
    lines = [
        "| setting | seed | arm | kappa first 5 | kappa last 5 | f_tau first 5 | f_tau last 5 "
        "| held-out acc K=2 | K=8 | held-out kappa K=8 | RL s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def span(values: list[float]) -> str:
        return f"{statistics.fmean(values):.2f} ({min(values):.2f}..{max(values):.2f})"

    for path in paths:
        r = json.loads(path.read_text())
        for arm in ARM_NAMES:
            if arm not in r:
                continue
            c, h = r[arm]["curves"], r[arm].get("held_out", {})

            def acc(k: int, h: dict[str, Any] = h) -> str:
                if f"sft_k{k}" not in h:
                    return "-"
                b, a = h[f"sft_k{k}"]["accuracy"], h[f"final_k{k}"]["accuracy"]
                return f"{b[0]:.2f} -> {a[0]:.2f} (±{a[1]:.2f})"

            kap = f"{h['sft_k8']['kappa']:.2f} -> {h['final_k8']['kappa']:.2f}" if h else "-"
            lines.append(
                f"| {r['name']} | {r['seed']} | {arm} | {span(c['kappa'][:5])} | "
                f"{span(c['kappa'][-5:])} | {span(c['f_tau'][:5])} | {span(c['f_tau'][-5:])} "
                f"| {acc(2)} | {acc(8)} | {kap} | {r['seconds'][arm]:.0f} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--name", help="name of the setting (recorded)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--synth", nargs="*", default=[], help="data.synth.KEY=VALUE overrides")
    parser.add_argument("--rollout", nargs="*", default=[], help="RL recipe overrides, both arms")
    parser.add_argument("--sft-steps", type=int, default=500)
    parser.add_argument("--rl-steps", type=int, default=30)
    parser.add_argument("--n-rl", type=int, default=32, help="RL prompt videos")
    parser.add_argument("--n-eval", type=int, default=32, help="held-out videos")
    parser.add_argument(
        "--probe",
        nargs="*",
        default=None,
        metavar="OVERRIDES",
        help="probe only: SFT policy rollouts per arm under the setting, then under each given "
        "extra variant ('a=1,b=2' per variant)",
    )
    parser.add_argument("--probe-prompts", type=int, default=16, help="RL prompts per probe")
    parser.add_argument("--no-eval", action="store_true", help="skip held-out evaluation")
    parser.add_argument("--work", type=Path, default=Path("runs/tool_prior_paradox"))
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--summarize", type=Path, nargs="+", help="print the table of these result JSONs and exit"
    )
    args = parser.parse_args()
    if args.summarize:
        print(summarize(args.summarize))
        return
    if not args.name or not args.out:
        parser.error("--name and --out are required (unless --summarize)")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import torch

    from paravt.train.rl import load_rl_examples, train_rl

    torch.set_num_threads(1)
    sizes = {"n_rl": args.n_rl, "n_eval": args.n_eval}
    t_start = time.perf_counter()
    result: dict[str, Any] = {
        "name": args.name,
        "seed": args.seed,
        "synth": args.synth,
        "rollout": args.rollout,
        "sft_steps": args.sft_steps,
        "rl_steps": args.rl_steps,
        "sizes": sizes,
        "load": {"start": os.getloadavg()},
        "seconds": {},
    }
    data, sft_model, sft_s = cold(args.work, args.seed, args.synth, args.sft_steps, sizes)
    result["seconds"]["sft"] = sft_s
    result["load"]["after_sft"] = os.getloadavg()
    print(f"[{args.name} s{args.seed}] SFT {sft_s:.0f} s; {_load()}", flush=True)
    run_root = args.work / f"rl-{_key(args.name, args.synth, args.rollout, args.sft_steps)}"
    run_root = run_root / f"s{args.seed}"

    def recipe(arm: str, extra: list[str], steps: int = args.rl_steps, sub: str = "") -> Any:
        return arm_recipe(
            run_root / f"{arm}{sub}", sft_model, data.rl, arm, args.seed, steps, extra
        )

    if args.probe is not None:
        variants = ["", *args.probe]
        result["probe"] = {}
        for variant in variants:
            extra = [*args.rollout, *[v for v in variant.split(",") if v]]
            for arm in ARM_NAMES:
                r = recipe(arm, extra, steps=1, sub="-probe")
                t0 = time.perf_counter()
                p = probe(sft_model, r, load_rl_examples(r)[: args.probe_prompts])
                p["seconds"] = round(time.perf_counter() - t0, 1)
                p["load"] = os.getloadavg()
                result["probe"][f"{variant or 'setting'}|{arm}"] = p
                print(
                    f"[{args.name} s{args.seed}] probe {variant or '(setting)'} {arm}: "
                    f"kappa {p['kappa']:.2f} use {p['tool_use_rate']:.2f} "
                    f"f_tau {p['f_tau']:.2f} acc {p['accuracy']:.2f} "
                    f"trunc {p['truncated_rate']:.2f} | call n={p['n_call']} "
                    f"R {p['reward_call']:.2f} acc {p['acc_call']:.2f} adv {p['adv_call']:+.2f}"
                    f" | broken n={p['n_broken']} R {p['reward_broken']:.2f} "
                    f"adv {p['adv_broken']:+.2f}"
                    f" | skip n={p['n_skip']} R {p['reward_skip']:.2f} acc {p['acc_skip']:.2f}"
                    f" adv {p['adv_skip']:+.2f} | mixed groups {p['mixed_groups']:.2f} "
                    f"({p['seconds']:.0f} s; {_load()})",
                    flush=True,
                )
    else:
        held_recipe = recipe("para_grpo", args.rollout, sub="-held")
        held = load_rl_examples(
            held_recipe.model_copy(
                update={
                    "data": held_recipe.data.model_copy(update={"parquet": [str(data.held_out)]})
                }
            )
        )
        for arm in ARM_NAMES:
            r = recipe(arm, args.rollout)
            t0 = time.perf_counter()
            final = train_rl(r)
            result["seconds"][arm] = round(time.perf_counter() - t0, 1)
            c = curves(run_root / arm)
            result[arm] = {"curves": c, "load": os.getloadavg()}
            (k0, k1), (f0, f1) = _ends(c["kappa"]), _ends(c["f_tau"])
            print(
                f"[{args.name} s{args.seed}] {arm}: kappa {k0:.2f} -> {k1:.2f}, f_tau {f0:.2f} -> "
                f"{f1:.2f} (first / last 5 steps), {result['seconds'][arm]:.0f} s; {_load()}",
                flush=True,
            )
            if args.no_eval:
                continue
            t0 = time.perf_counter()
            evals = {}
            for k in EVAL_BUDGETS:
                evals[f"sft_k{k}"] = held_out(sft_model, r, held, k)
                evals[f"final_k{k}"] = held_out(Path(final), r, held, k)
            result[arm]["held_out"] = evals
            result["seconds"][f"{arm}_eval"] = round(time.perf_counter() - t0, 1)
            for k in EVAL_BUDGETS:
                b, a = evals[f"sft_k{k}"], evals[f"final_k{k}"]
                print(
                    f"    held-out K={k}: acc {b['accuracy'][0]:.2f} -> {a['accuracy'][0]:.2f}, "
                    f"kappa {b['kappa']:.2f} -> {a['kappa']:.2f}, "
                    f"f_tau {b['f_tau']:.2f} -> {a['f_tau']:.2f}",
                    flush=True,
                )
    result["seconds"]["total"] = round(time.perf_counter() - t_start, 1)
    result["load"]["end"] = os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"[{args.name} s{args.seed}] wrote {args.out} ({result['seconds']['total']:.0f} s)")


if __name__ == "__main__":
    main()
