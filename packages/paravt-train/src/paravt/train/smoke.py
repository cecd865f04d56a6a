"""The main job (`nox -s train_smoke`): tiny model -> synthetic tasks -> SFT -> PARA-GRPO -> summary.

Writes OUT/metrics.jsonl (RL), OUT/curves.png, OUT/final/ (HF-loadable), OUT/sft/ (the cold
start) and OUT/summary.md with f_tau / kappa / accuracy before and after RL, measured on the same
prompts at the rollout temperature, plus wall time and peak memory (getrusage).
"""

from __future__ import annotations

import logging
import resource
import time
from pathlib import Path

from paravt.train.plot import plot_runs
from paravt.train.recipe import DataSpec, RLRecipe, SFTRecipe, load_recipe

log = logging.getLogger("paravt.train")


def _peak_rss_gib() -> tuple[float, float]:
    """Peak resident memory of this process and of its finished children, in GiB (Linux: KiB)."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20
    return own, kids


# The smoke run's task, shaped by what a 1 M-parameter model learns in minutes on 2 cores
# (ENVIRONMENT.md, "What a tiny model can learn"): colour-word (oe) and fixed-order (mcq) answers,
# few frames per crop, a short overview. tvg (timestamps) is left out: it needs far more steps.
SMOKE_SYNTH = [
    "data.synth.n=24",
    "data.synth.duration_s=60",
    "data.synth.question_types=[oe,mcq]",
    "data.synth.sft_overview_frames=8",
    "data.synth.crop_max_frames=4",
]
SMOKE_VIDEO = ["video.overview_frames=8", "video.max_crop_frames=4"]
# 400 steps of 8 traces: the teacher's ~210-token first turn (think, then three JSON calls) must be
# nearly memorised before sampling at temperature 0.7 yields parseable calls (measured: 120 steps
# give loss 0.55 and no executed call; 360 steps give loss 0.03 and calls). Packing into 2048-token
# micro-batches keeps the short sub-agent traces from being padded to the long main traces.
SMOKE_SFT = [
    "max_steps=400",
    "sft.batch_size=8",
    "sft.packing=true",
    "sft.packing_length=2048",
    "optim.lr=1e-3",
    "optim.warmup_steps=15",
]
# Turns and calls per turn as in the teacher traces' system prompt (3 and 5), and a token budget
# that fits the teacher's first turn.
SMOKE_RL = [
    "max_steps=8",
    "rollout.max_turns=3",
    "rollout.max_parallel=5",
    "rollout.max_new_tokens=256",
    "rollout.subagent_max_new_tokens=80",
    "optim.lr=5e-5",
    "checkpoint.every_steps=0",
]
EVAL_PROMPTS = 16


def run_smoke(out: Path, *, sft_steps: int | None = None, rl_steps: int | None = None) -> Path:
    """Run the whole pipeline into `out`; returns the path of summary.md.

    Base model, SFT model and RL model are each evaluated on the same `EVAL_PROMPTS` prompts x
    `group_size` rollouts at the rollout temperature (`paravt.train.rl.evaluate`).
    """
    import json

    from paravt.train.frames import ensure_synth
    from paravt.train.modeling import ensure_model
    from paravt.train.rl import evaluate, load_rl_examples, train_rl
    from paravt.train.sft import train_sft

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    t0 = time.perf_counter()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    synth = out / "synth"
    data = [f"data.synth.out_dir={synth}", *SMOKE_SYNTH, *SMOKE_VIDEO]
    rl_over = [
        f"output_dir={out}",
        f"model.path={out / 'sft' / 'final'}",
        f"data.parquet=[{synth / 'rl.parquet'}]",
        *data,
        *SMOKE_RL,
        *([f"max_steps={rl_steps}"] if rl_steps else []),
    ]
    rl = load_recipe("tiny_paragrpo", rl_over, stage="rl")
    assert isinstance(rl, RLRecipe)
    # Teacher traces at every overview budget the gate draws: traces shown only the 8-frame
    # overview taught a first run to call tools at K=8 and never at K=2 or 4 (kappa 1.6 vs 0).
    assert rl.data.synth is not None
    budgets = sorted(set(rl.gating.choices) if rl.gating.enabled else {rl.video.overview_frames})
    sft_sets = {k: out / f"synth-sft-k{k}" for k in budgets}
    sft_over = [
        f"output_dir={out / 'sft'}",
        f"model.path={out / 'tiny-model'}",
        f"data.parquet=[{', '.join(str(d / 'sft.parquet') for d in sft_sets.values())}]",
        "data.synth=null",
        *SMOKE_VIDEO,
        *SMOKE_SFT,
        *([f"max_steps={sft_steps}"] if sft_steps else []),
    ]
    sft = load_recipe("tiny_sft", sft_over, stage="sft")
    assert isinstance(sft, SFTRecipe)

    base_model = ensure_model(sft.model)
    examples = load_rl_examples(rl)  # generates the synthetic task set
    for k, d in sft_sets.items():  # same seed: the same videos, traces over a K-frame overview
        spec = rl.data.synth.model_copy(update={"out_dir": str(d), "sft_overview_frames": k})
        ensure_synth(DataSpec(parquet=[str(d / "sft.parquet")], synth=spec))
    # Held prompts: both question types of the first videos (rows are video-major).
    held = examples[: min(len(examples), EVAL_PROMPTS)]
    t = time.perf_counter()
    base = evaluate(base_model, rl, held)
    t_eval = time.perf_counter() - t
    t = time.perf_counter()
    sft_final = train_sft(sft)
    t_sft = time.perf_counter() - t
    sft_rows = [json.loads(x) for x in (out / "sft" / "metrics.jsonl").read_text().splitlines()]
    t = time.perf_counter()
    before = evaluate(sft_final, rl, held)
    t_eval += time.perf_counter() - t
    t = time.perf_counter()
    final = train_rl(rl)
    t_rl = time.perf_counter() - t
    t = time.perf_counter()
    after = evaluate(final, rl, held)
    t_eval += time.perf_counter() - t
    curves = plot_runs([out], out / "curves.png")
    own, kids = _peak_rss_gib()
    wall = time.perf_counter() - t0

    rows = [
        ("f_tau (format reward)", "f_tau"),
        ("kappa (tool calls / rollout)", "kappa"),
        ("tool-use rate", "tool_use_rate"),
        ("accuracy", "accuracy"),
        ("reward", "reward/total"),
        ("turns / rollout", "turns"),
        ("main tokens generated / rollout", "len/main_generated"),
    ]

    def first_last(key: str, k: int = 5) -> tuple[float, float]:
        vals = [r[key] for r in sft_rows]
        return sum(vals[:k]) / len(vals[:k]), sum(vals[-k:]) / len(vals[-k:])

    loss0, loss1 = first_last("loss")
    lines = [
        "# ParaVT smoke run: tiny Qwen3-VL, synthetic tasks, SFT then PARA-GRPO",
        "",
        f"Each column: the same {len(held)} prompts x {rl.rollout.group_size} rollouts at "
        f"temperature {rl.rollout.temperature}, nFrames gating {list(rl.gating.choices)}, "
        f"{rl.rollout.max_turns} turns, sub-agents answering the crop_video calls.",
        "",
        "| metric | base (random init) | after SFT | after SFT + PARA-GRPO |",
        "|---|---|---|---|",
        *[
            f"| {name} | {base[key]:.3f} | {before[key]:.3f} | {after[key]:.3f} |"
            for name, key in rows
        ],
        "",
        f"- synthetic task set: {rl.data.synth.n} videos, question types "
        f"{rl.data.synth.question_types}, {len(examples)} RL prompts; SFT teacher traces over "
        f"{budgets}-frame overviews",
        f"- SFT: {sft.max_steps} steps of {sft.sft.batch_size} traces in {t_sft:.0f} s "
        f"({t_sft / max(sft.max_steps, 1):.2f} s/step); "
        f"loss {loss0:.2f} (first 5 steps) -> {loss1:.2f} (last 5)",
        f"- RL: {rl.max_steps} steps of {rl.rollout.batch_prompts} prompts x "
        f"{rl.rollout.group_size} rollouts in {t_rl:.0f} s",
        f"- evaluation (3 columns): {t_eval:.0f} s",
        f"- wall time: {wall:.0f} s",
        f"- peak memory (max RSS): {own:.2f} GiB this process, {kids:.2f} GiB largest child",
        f"- files: metrics.jsonl, {curves.name}, final/ (HF-loadable), sft/final/, synth/, synth-sft-k*/",
        "",
        "A 1 M-parameter random model: the table shows what SFT and a few RL steps change in "
        "minutes on a CPU, not the paper's numbers.",
    ]
    summary = out / "summary.md"
    summary.write_text("\n".join(lines) + "\n")
    print(summary.read_text())
    return summary
