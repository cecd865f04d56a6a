"""`paravt-eval reproduce`: the paper's Table 1 and Table 2 layouts, filled from our own runs.

Offline default (what `nox -s reproduce` runs, CPU, no downloads):
1. the four training stages as checkpoints: given with `--checkpoints stage=PATH,...`, or trained
   here with paravt-train's smoke-proven tiny setup (`paravt.train.smoke`: its synthetic task,
   video and SFT/RL settings, teacher traces at every gated overview budget): base = the untrained
   tiny Qwen3-VL, +SFT, +SFT+GRPO (vanilla), +SFT+PARA-GRPO; a stage that cannot be trained is
   reported as not filled, with the reason;
2. a held-out synthetic benchmark (`paravt-tools synth` with another seed, the training task's
   video length and crop frames, plus grounding questions) and its lmms-eval tasks;
3. every (stage, task) cell through the real lmms-eval CLI with `--model paravt`, under the
   training protocol (overview frames, frames per crop, pixel budget, turns, calls per turn and
   token budgets of the tiny RL recipe), and block C (the PARA-GRPO checkpoint with sequential
   dispatch) the same way;
4. f_tau (mean format reward of rollouts at the training temperature, scored with the PARA-GRPO
   recipe's reward) and kappa (mean executed tool calls per rollout) per stage;
5. Table 1 (one column per task plus the average), Table 2 (f_tau, kappa, accuracies per stage;
   block C sequential vs parallel) as markdown + JSON, and a PNG chart.

Each finished cell is a JSON file under `OUT/cells/`; a re-run skips it. A cell with errored
samples says how many. With `--paper-splits`, the seven paper splits run through the `paravt_paper`
task group under protocol=paper, as the released driver ran them (datasets and a GPU needed), and
fill Table 1's paper columns.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

STAGES = ("base", "sft", "grpo", "para_grpo")
STAGE_LABELS = {
    "base": "Base (untrained tiny Qwen3-VL)",
    "sft": "+SFT",
    "grpo": "+SFT+GRPO",
    "para_grpo": "+SFT+PARA-GRPO",
    "para_grpo_sequential": "+SFT+PARA-GRPO, sequential dispatch",
}
SHORT_LABELS = {"base": "base", "sft": "+SFT", "grpo": "+GRPO", "para_grpo": "+PARA-GRPO"}
TRAIN_RECIPES = {
    "sft": ("sft", "tiny_sft"),
    "grpo": ("rl", "tiny_vanilla_grpo"),
    "para_grpo": ("rl", "tiny_paragrpo"),
}
# The held-out benchmark also asks "when" questions (Table 1's grounding column); the tiny stages
# are not trained on them (the smoke task leaves them out), so that column measures transfer.
EVAL_QUESTION_TYPES = ("mcq", "tvg", "oe")


@dataclass(frozen=True)
class Column:
    task: str  # lmms-eval task name
    label: str
    metric: str  # key in lmms-eval's results[task] (without the ",none" filter suffix)


SYNTH_COLUMNS = (
    Column("paravt_synth_mcq", "Synth MCQ (acc)", "accuracy"),
    Column("paravt_synth_grounding", "Synth TVG (mIoU)", "miou"),
    Column("paravt_synth_oe", "Synth OE (acc)", "accuracy"),
)
# The seven paper splits as the released driver ran them: paravt-eval's `paravt_paper` task group
# (the driver's datasets, question layout and scoring) under protocol=paper.
PAPER_COLUMNS = (
    Column("paravt_paper_videomme", "VideoMME w/o sub", "accuracy"),
    Column("paravt_paper_videomme_wsub", "VideoMME w/ sub", "accuracy"),
    Column("paravt_paper_longvideobench", "LongVideoBench", "accuracy"),
    Column("paravt_paper_lvbench", "LVBench", "accuracy"),
    Column("paravt_paper_mlvu", "MLVU", "accuracy"),
    Column("paravt_paper_mmvu", "MMVU", "accuracy"),
    Column("paravt_paper_charades", "Charades-STA (mIoU)", "miou"),
)
# How the driver ran them: agentic_general for the MCQ splits; Charades-STA with agentic_minimal
# and the video_url channel (see paravt-eval's README, "Reproduce Table 1").
PAPER_PROTOCOL = {"protocol": "paper", "prompt_mode": "agentic_general"}
PAPER_GROUNDING_PROTOCOL = {
    "protocol": "paper",
    "prompt_mode": "agentic_minimal",
    "video_channel": "video_url",
}
# Table 1 of the paper, for reference rows (percent).
PAPER_TABLE1 = {
    "Qwen3-VL-8B (paper)": [59.9, 68.4, 52.2, 33.1, 58.3, 68.0, 49.3],
    "ParaVT-8B (paper)": [62.1, 69.4, 60.4, 39.8, 65.0, 68.6, 50.1],
}


class ReproduceConfig(BaseModel):
    """What `reproduce` runs. Defaults fit 2 CPU cores in well under 15 minutes.

    Protocol fields left at None come from paravt-train's tiny setup (`tiny_setup()`), so the
    stages are evaluated the way they were trained.
    """

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    out: Path = Field(Path("runs/reproduce"), description="Output directory.")
    checkpoints: str | None = Field(
        None, description="stage=PATH pairs (base, sft, grpo, para_grpo), comma separated."
    )
    synth_dir: Path | None = Field(
        None, description="Existing `paravt-tools synth` directory to evaluate on."
    )
    n_videos: int = Field(6, ge=1, description="Held-out synthetic videos to generate.")
    duration_s: float | None = Field(
        None, gt=0, description="Length of each held-out video (None: the training task's)."
    )
    eval_seed: int = Field(
        1, description="Seed of the held-out benchmark (the tiny stages train on seed 0)."
    )
    limit: int | None = Field(6, ge=1, description="Documents per synthetic task.")
    train: bool = Field(True, description="Train missing tiny stages with paravt-train.")
    paper_splits: bool = Field(False, description="Also run the seven paper splits.")
    main_nframes: int | None = Field(None, ge=1, description="Overview frames K.")
    max_crop_frames: int | None = Field(None, ge=1, description="Frames per crop at most.")
    max_pixels: int | None = Field(None, ge=784, description="Pixel budget per frame.")
    max_new_tokens: int | None = Field(None, ge=1, description="Main-agent tokens per turn.")
    subagent_max_new_tokens: int | None = Field(None, ge=1, description="Tokens per summary.")
    max_turns: int | None = Field(None, ge=1, description="Main-agent turns.")
    max_parallel: int | None = Field(None, ge=1, description="crop_video calls per turn.")
    ftau_rollouts: int = Field(24, ge=1, description="Rollouts per stage for f_tau and kappa.")
    batch_size: int = Field(8, ge=1, description="Samples generated together.")
    device: str = "cpu"


@dataclass(frozen=True)
class TinySetup:
    """paravt-train's smoke-proven tiny setup: recipe overrides and what they resolve to.

    The numbers live in `paravt.train.smoke` (`SMOKE_SYNTH`, `SMOKE_VIDEO`, `SMOKE_SFT`,
    `SMOKE_RL`); this only reads them, through paravt-train's own recipe loader.
    """

    sft_overrides: tuple[str, ...]  # SFT settings (steps, batch, packing, lr) and video settings
    rl_overrides: tuple[str, ...]  # RL settings (steps, turns, calls, tokens, lr) and video
    synth: Any  # paravt.train.recipe.SynthSpec of the training task (seed, n, length, crop frames)
    budgets: tuple[int, ...]  # overview budgets the PARA-GRPO gate draws: one SFT trace set each
    protocol: dict[str, Any]  # EvalConfig fields of the training protocol
    temperature: float  # rollout temperature (f_tau is measured at it)
    reward: Any  # paravt.rewards.RewardConfig of the PARA-GRPO recipe (scores f_tau)


def tiny_setup() -> TinySetup:
    """Load paravt-train's smoke setup (raises ImportError when paravt-train is missing)."""
    from paravt.train.recipe import RLRecipe, load_recipe
    from paravt.train.smoke import SMOKE_RL, SMOKE_SFT, SMOKE_SYNTH, SMOKE_VIDEO

    rl = load_recipe(
        "tiny_paragrpo",
        ["data.synth.out_dir=.", *SMOKE_SYNTH, *SMOKE_VIDEO, *SMOKE_RL],
        stage="rl",
    )
    assert isinstance(rl, RLRecipe) and rl.data.synth is not None
    budgets = sorted(set(rl.gating.choices) if rl.gating.enabled else {rl.video.overview_frames})
    return TinySetup(
        sft_overrides=(*SMOKE_VIDEO, *SMOKE_SFT),
        rl_overrides=(*SMOKE_VIDEO, *SMOKE_RL),
        synth=rl.data.synth,
        budgets=tuple(budgets),
        protocol={
            "main_nframes": rl.video.overview_frames,
            "max_crop_frames": rl.video.max_crop_frames,
            "max_pixels": rl.video.max_pixels,
            "max_new_tokens": rl.rollout.max_new_tokens,
            "subagent_max_new_tokens": rl.rollout.subagent_max_new_tokens,
            "max_turns": rl.rollout.max_turns,
            "max_parallel": rl.rollout.max_parallel,
        },
        temperature=rl.rollout.temperature,
        reward=rl.reward.build(),
    )


def _setup_or_none() -> TinySetup | None:
    try:
        return tiny_setup()
    except ImportError:
        return None


def eval_protocol(config: ReproduceConfig, setup: TinySetup | None) -> dict[str, Any]:
    """EvalConfig fields of the offline protocol: the config's, else the training protocol's,
    else (paravt-train missing) the paper's EvalConfig defaults."""
    base = dict(setup.protocol) if setup is not None else {}
    for key in (
        "main_nframes",
        "max_crop_frames",
        "max_pixels",
        "max_new_tokens",
        "subagent_max_new_tokens",
        "max_turns",
        "max_parallel",
    ):
        value = getattr(config, key)
        if value is not None:
            base[key] = value
    return base


@dataclass
class ReproduceResult:
    markdown_path: Path
    json_path: Path
    chart_path: Path
    tables: dict[str, Any]


def _log(msg: str) -> None:
    print(f"[reproduce] {msg}", flush=True)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("HF_DATASETS_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


def _run(cmd: list[str], log: Path) -> tuple[int, str]:
    """Run `cmd`, streaming output to `log`; return the exit code and the output's tail."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w", encoding="utf-8") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=_env(), check=False)
    lines = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    return proc.returncode, "\n".join(lines[-6:])


# --------------------------------------------------------------------------------------------------
# Inputs: data and checkpoints


def parse_checkpoints(text: str | None) -> dict[str, Path]:
    """`base=PATH,sft=PATH` -> {stage: path}; unknown stages and missing directories are errors."""
    out: dict[str, Path] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        stage, sep, path = item.partition("=")
        stage = stage.strip()
        if not sep or stage not in STAGES:
            raise ValueError(
                f"--checkpoints entry {item!r}: expected stage=PATH with stage one of "
                f"{', '.join(STAGES)}"
            )
        p = Path(path.strip()).expanduser()
        if not p.is_dir():
            raise ValueError(f"--checkpoints {stage}: {p} is not a checkpoint directory")
        out[stage] = p
    return out


def _generate_synth(out: Path, n: int, config: Any, seed: int, log: Path) -> None:
    """`paravt.tools.synth.generate` into `out` (its output goes to `log`)."""
    import contextlib

    from paravt.tools.synth import generate

    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w", encoding="utf-8") as f, contextlib.redirect_stderr(f):
        result = generate(out, n=n, config=config, seed=seed)
        f.write(f"{len(result.videos)} videos, {result.num_rl_rows} RL rows, ")
        f.write(f"{result.num_sft_rows} SFT rows in {result.seconds:.1f} s\n")


def ensure_synth(config: ReproduceConfig, setup: TinySetup | None = None) -> Path:
    """The held-out synthetic benchmark, generated with `paravt-tools synth` if needed: the
    training task's video length and frames per crop (from `setup`), another seed, and every
    question type of Table 1 (`EVAL_QUESTION_TYPES`)."""
    if config.synth_dir is not None:
        return config.synth_dir
    synth = config.out / "synth"
    if (synth / "rl.parquet").is_file():
        return synth
    from paravt.tools.synth import SynthConfig

    fields: dict[str, Any] = {"question_types": EVAL_QUESTION_TYPES}
    if setup is not None:
        fields.update(
            duration_s=setup.synth.duration_s,
            crop_max_frames=setup.synth.crop_max_frames,
            sft_overview_frames=setup.synth.sft_overview_frames,
        )
    if config.duration_s is not None:
        fields["duration_s"] = config.duration_s
    synth_config = SynthConfig(**fields)
    _log(
        f"generating {config.n_videos} held-out synthetic videos of {synth_config.duration_s:g} s "
        f"(seed {config.eval_seed}) in {synth}"
    )
    _generate_synth(
        synth, config.n_videos, synth_config, config.eval_seed, config.out / "logs" / "synth.log"
    )
    return synth


def ensure_train_data(config: ReproduceConfig, setup: TinySetup) -> dict[int, Path]:
    """The tiny stages' training task (paravt-train's smoke spec), one directory per overview
    budget K the gate draws: the same videos and RL rows, SFT teacher traces over a K-frame
    overview. Returns {K: directory}."""
    from paravt.tools.synth import SynthConfig

    spec = setup.synth
    dirs = {k: config.out / "train" / f"synth-k{k}" for k in setup.budgets}
    for k, d in dirs.items():
        if (d / "rl.parquet").is_file() and (d / "sft.parquet").is_file():
            continue
        _log(
            f"generating the training task: {spec.n} videos of {spec.duration_s:g} s, "
            f"{list(spec.question_types)} questions, teacher traces over {k} overview frames"
        )
        synth_config = SynthConfig(
            duration_s=spec.duration_s,
            question_types=tuple(spec.question_types),
            sft_overview_frames=k,
            crop_max_frames=spec.crop_max_frames,
        )
        _generate_synth(
            d, spec.n, synth_config, spec.seed, config.out / "logs" / f"train_synth_k{k}.log"
        )
    return dirs


def ensure_checkpoints(config: ReproduceConfig) -> tuple[dict[str, Path], dict[str, str]]:
    """Checkpoints per stage, and for each stage that has none, the reason."""
    given = parse_checkpoints(config.checkpoints)
    missing: dict[str, str] = {}
    ckpts = dict(given)
    if "base" not in ckpts:
        from paravt.core.tiny import build_tiny_qwen3vl

        base = config.out / "train" / "base"
        if not (base / "config.json").is_file():
            _log("building the untrained tiny Qwen3-VL (base stage)")
            build_tiny_qwen3vl(base, seed=0)
        ckpts["base"] = base
    previous = {"sft": "base", "grpo": "sft", "para_grpo": "sft"}
    setup: TinySetup | None = None
    data: dict[int, Path] | None = None
    for stage in ("sft", "grpo", "para_grpo"):
        if stage in ckpts:
            continue
        final = config.out / "train" / stage / "final"
        if (final / "config.json").is_file():
            ckpts[stage] = final
            continue
        if not config.train:
            missing[stage] = "no checkpoint given (--checkpoints) and training is off (--no-train)"
            continue
        parent = previous[stage]
        if parent not in ckpts:
            missing[stage] = f"needs the {parent} checkpoint, which is missing"
            continue
        if setup is None:
            setup = _setup_or_none()
            if setup is None:
                missing[stage] = "paravt-train is not installed (pip install 'paravt-eval[train]')"
                continue
            data = ensure_train_data(config, setup)
        assert data is not None
        reason = train_stage(config, stage, ckpts[parent], data, setup)
        if reason is None and (final / "config.json").is_file():
            ckpts[stage] = final
        else:
            missing[stage] = reason or f"training wrote no checkpoint at {final}"
    return ckpts, missing


def train_stage(
    config: ReproduceConfig, stage: str, init: Path, data: dict[int, Path], setup: TinySetup
) -> str | None:
    """Train one tiny stage with paravt-train's recipe and the smoke overrides; None on success,
    else why it failed. SFT reads the teacher traces of every overview budget; GRPO and
    PARA-GRPO read the RL rows (the same in every budget's directory)."""
    command, recipe = TRAIN_RECIPES[stage]
    out = config.out / "train" / stage
    if command == "sft":
        parquet = ", ".join(str(d / "sft.parquet") for d in data.values())
        overrides = setup.sft_overrides
    else:
        parquet = str(next(iter(data.values())) / "rl.parquet")
        overrides = setup.rl_overrides
    cmd = [
        sys.executable,
        "-m",
        "paravt.train",
        command,
        recipe,
        f"output_dir={out}",
        f"model.path={init}",
        "model.build_tiny=false",
        f"data.parquet=[{parquet}]",
        "data.synth=null",
        "logging.progress=false",
        *overrides,
    ]
    _log(f"training {STAGE_LABELS[stage]} from {init} ({recipe} + paravt.train.smoke settings)")
    t0 = time.perf_counter()
    code, tail = _run(cmd, config.out / "logs" / f"train_{stage}.log")
    _log(f"{STAGE_LABELS[stage]}: {time.perf_counter() - t0:.0f} s")
    if code != 0:
        return f"paravt-train {command} {recipe} failed (exit {code}): {tail.splitlines()[-1:]}"
    return None


# --------------------------------------------------------------------------------------------------
# Cells


def _cell_path(out: Path, model: str, task: str) -> Path:
    return out / "cells" / f"{model}__{task}.json"


def _latest_results(output_path: Path) -> dict[str, Any]:
    files = sorted(output_path.rglob("*_results.json"), key=lambda p: p.stat().st_mtime)
    if not files:
        raise RuntimeError(f"lmms-eval wrote no *_results.json under {output_path}")
    return json.loads(files[-1].read_text(encoding="utf-8"))


def _metric(values: dict[str, Any], name: str) -> float | None:
    for key in (f"{name},none", name):
        v = values.get(key)
        if isinstance(v, (int, float)):
            return float(v)
    return None


def run_lmms_cells(
    config: ReproduceConfig,
    model: str,
    ckpt: Path,
    columns: tuple[Column, ...],
    include_path: Path | None,
    *,
    dispatch: str = "parallel",
    protocol: dict[str, Any] | None = None,
) -> None:
    """Evaluate every missing (model, task) cell with one lmms-eval CLI run, under `protocol`
    (EvalConfig fields; None: the paper's defaults)."""
    todo = [c for c in columns if not _cell_path(config.out, model, c.task).is_file()]
    if include_path is not None:  # a synthetic task without documents has no YAML
        todo = [c for c in todo if (include_path / f"{c.task}.yaml").is_file()]
    if not todo:
        _log(f"{model}: every cell already done, skipped")
        return
    run_dir = config.out / "lmms" / model
    traces = config.out / "traces" / f"{model}.jsonl"
    args = [
        f"pretrained={ckpt}",
        *(f"{k}={v}" for k, v in (protocol or {}).items()),
        f"dispatch={dispatch}",
        f"device={config.device}",
        f"traces={traces}",
    ]
    cmd = [
        sys.executable,
        "-m",
        "lmms_eval",
        "--model",
        "paravt",
        "--model_args",
        ",".join(args),
        "--tasks",
        ",".join(c.task for c in todo),
        "--output_path",
        str(run_dir),
        "--batch_size",
        str(config.batch_size),
        "--log_samples",
    ]
    if include_path is not None:
        cmd += ["--include_path", str(include_path)]
    _log(f"{model}: lmms-eval on {', '.join(c.task for c in todo)}")
    t0 = time.perf_counter()
    code, tail = _run(cmd, config.out / "logs" / f"lmms_{model}.log")
    if code != 0:
        raise RuntimeError(f"lmms-eval for {model} failed (exit {code}):\n{tail}")
    try:
        results = _latest_results(run_dir)
    except RuntimeError as exc:  # lmms-eval exits 0 even when it fails
        raise RuntimeError(
            f"{exc}; see {config.out / 'logs' / f'lmms_{model}.log'}:\n{tail}"
        ) from None
    for c in todo:
        values = results.get("results", {}).get(c.task)
        if values is None:
            raise RuntimeError(f"lmms-eval results for {model} have no task {c.task}")
        metrics = {k.split(",")[0]: v for k, v in values.items() if isinstance(v, (int, float))}
        cell = {
            "model": model,
            "task": c.task,
            "metric": c.metric,
            "value": _metric(values, c.metric),
            "metrics": metrics,
            "errored": int(metrics.get("errored", 0)),
            "samples": results.get("n-samples", {}).get(c.task, {}).get("effective"),
            "seconds": round(time.perf_counter() - t0, 1),
        }
        path = _cell_path(config.out, model, c.task)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(cell, indent=2) + "\n", encoding="utf-8")


def run_train_stats(
    config: ReproduceConfig,
    stage: str,
    ckpt: Path,
    task_dir: Path,
    *,
    protocol: dict[str, Any] | None = None,
    temperature: float = 0.7,
    reward: Any = None,
) -> None:
    """f_tau and kappa of one checkpoint: `config.ftau_rollouts` rollouts at `temperature` over
    the MCQ and OE documents (cycled) under `protocol`. f_tau is the mean format reward of
    `reward` (a paravt.rewards.RewardConfig; default: the PARA-GRPO preset), kappa the mean
    executed crop_video calls per rollout."""
    path = _cell_path(config.out, stage, "train_stats")
    if path.is_file():
        return
    from paravt.eval.agent import EvalAgent, VideoQuestion, options_from
    from paravt.eval.config import EvalConfig
    from paravt.rewards import RewardConfig, score

    pool: list[dict[str, Any]] = []
    for name in ("paravt_synth_mcq", "paravt_synth_oe"):
        f = task_dir / f"{name}.jsonl"
        if f.is_file():
            pool += [json.loads(line) for line in f.read_text(encoding="utf-8").splitlines()]
    if not pool:
        return
    docs = [pool[i % len(pool)] for i in range(config.ftau_rollouts)]
    eval_config = EvalConfig(
        pretrained=str(ckpt),
        **(protocol or {}),
        temperature=temperature,
        device=config.device,
        batch_size=config.batch_size,
    )
    _log(f"{stage}: {len(docs)} rollouts at temperature {temperature:g} for f_tau and kappa")
    t0 = time.perf_counter()
    agent = EvalAgent(eval_config)
    samples = [
        VideoQuestion(
            key=f"{d['id']}#{i}",
            video=d["video"],
            question=d["question"],
            options=options_from(d.get("paravt_options")),
            task="train_stats",
            doc_id=i,
        )
        for i, d in enumerate(docs)
    ]
    traces = agent.run(samples)
    reward_config = reward if reward is not None else RewardConfig.paragrpo()
    fmt, calls, errored = [], [], 0
    for doc, trace in zip(docs, traces):
        if trace.error:
            errored += 1
            continue
        transcript = "\n".join(t["response"] for t in trace.turns)
        fmt.append(score(transcript, doc["answer"], doc["question_type"], reward_config).format)
        calls.append(trace.num_tool_calls)
    cell = {
        "model": stage,
        "task": "train_stats",
        "f_tau": sum(fmt) / len(fmt) if fmt else None,
        "kappa": sum(calls) / len(calls) if calls else None,
        "tool_usage_rate": sum(c > 0 for c in calls) / len(calls) if calls else None,
        "rollouts": len(fmt),
        "errored": errored,
        "temperature": temperature,
        "seconds": round(time.perf_counter() - t0, 1),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cell, indent=2) + "\n", encoding="utf-8")


# --------------------------------------------------------------------------------------------------
# Tables


def _load_cell(out: Path, model: str, task: str) -> dict[str, Any] | None:
    path = _cell_path(out, model, task)
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def _pct(value: float | None) -> float | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return value * 100.0 if value <= 1.0 else value


def _fmt(value: float | None, errored: int = 0, digits: int = 1) -> str:
    if value is None:
        return "-"
    text = f"{value:.{digits}f}"
    return text + (f" ({errored} errored)" if errored else "")


def build_tables(
    out: Path, models: list[str], columns: tuple[Column, ...], missing: dict[str, str]
) -> dict[str, Any]:
    """Table 1 and Table 2 as data: values in percent, None for an empty cell."""
    table1 = []
    for model in models:
        cells = [_load_cell(out, model, c.task) for c in columns]
        values = [_pct(c["value"]) if c else None for c in cells]
        filled = [v for v in values if v is not None]
        table1.append(
            {
                "model": model,
                "label": STAGE_LABELS.get(model, model),
                "values": values,
                "errored": [c["errored"] if c else 0 for c in cells],
                "samples": [c.get("samples") if c else None for c in cells],
                "avg": sum(filled) / len(filled) if len(filled) == len(values) else None,
                "avg_tool_calls": [
                    c["metrics"].get("avg_tool_calls") if c else None for c in cells
                ],
                "tool_usage_rate": [
                    c["metrics"].get("tool_usage_rate") if c else None for c in cells
                ],
                "missing": missing.get(model),
            }
        )
    table2 = []
    for row in table1:
        if row["model"] not in STAGES:
            continue
        stats = _load_cell(out, row["model"], "train_stats") or {}
        table2.append(
            {
                **row,
                "f_tau": stats.get("f_tau"),
                "kappa": stats.get("kappa"),
                "rollouts": stats.get("rollouts"),
            }
        )
    block_c = [r for r in table1 if r["model"] in ("para_grpo_sequential", "para_grpo")]
    return {
        "columns": [c.label for c in columns],
        "tasks": [c.task for c in columns],
        "table1": table1,
        "table2": table2,
        "block_c": block_c,
        "missing": missing,
    }


def render_markdown(tables: dict[str, Any], paper: bool) -> str:
    cols = tables["columns"]
    lines = ["# ParaVT reproduction", ""]
    protocol = tables.get("protocol") or {}
    if protocol:
        samples = sorted({n for r in tables["table1"] for n in r.get("samples", []) if n})
        lines += [
            "Protocol (the tiny stages' training protocol): "
            f"{protocol.get('main_nframes', 64)} overview frames, "
            f"at most {protocol.get('max_crop_frames', 16)} frames per crop, "
            f"{protocol.get('max_pixels', 50176)} pixels per frame, "
            f"{protocol.get('max_turns', 3)} turns, "
            f"at most {protocol.get('max_parallel', 5)} parallel calls per turn, "
            f"{protocol.get('max_new_tokens', 2048)} / "
            f"{protocol.get('subagent_max_new_tokens', 256)} new tokens (main / sub-agent), "
            "greedy. "
            + (f"{'/'.join(map(str, samples))} documents per task. " if samples else "")
            + (f"Wall time {tables['seconds']:.0f} s." if tables.get("seconds") else ""),
            "",
        ]
    lines += [
        "## Table 1 layout: accuracy per benchmark (mIoU for grounding), percent",
        "",
        "| Model | " + " | ".join(cols) + " | Avg |",
        "|---|" + "---|" * (len(cols) + 1),
    ]
    for row in tables["table1"]:
        if row["model"] == "para_grpo_sequential":
            continue
        vals = [_fmt(v, e) for v, e in zip(row["values"], row["errored"])]
        lines.append(f"| {row['label']} | " + " | ".join(vals) + f" | {_fmt(row['avg'])} |")
    if paper:
        for name, vals in PAPER_TABLE1.items():
            avg = sum(vals) / len(vals)
            lines.append(f"| {name} | " + " | ".join(f"{v:.1f}" for v in vals) + f" | {avg:.1f} |")
    lines += [
        "",
        "## Table 2 layout: training stages",
        "",
        "f_tau: mean format reward (PARA-GRPO recipe's reward) of rollouts at temperature "
        f"{protocol.get('f_tau_temperature', 0.7)}; kappa: mean executed crop_video calls per "
        "rollout; "
        + (
            f"{tables['table2'][0].get('rollouts')} rollouts per stage. "
            if tables["table2"] and tables["table2"][0].get("rollouts")
            else ""
        )
        + "Block B (anchoring or gating alone) is not run.",
        "",
        "| Stage | f_tau | kappa | " + " | ".join(cols) + " | Avg |",
        "|---|---|---|" + "---|" * (len(cols) + 1),
    ]
    for row in tables["table2"]:
        vals = [_fmt(v, e) for v, e in zip(row["values"], row["errored"])]
        lines.append(
            f"| {row['label']} | {_fmt(row['f_tau'], digits=2)} | {_fmt(row['kappa'], digits=2)} | "
            + " | ".join(vals)
            + f" | {_fmt(row['avg'])} |"
        )
    lines += ["", "### Block C: dispatch of the +SFT+PARA-GRPO checkpoint", ""]
    lines += ["| Dispatch | " + " | ".join(cols) + " | Avg |", "|---|" + "---|" * (len(cols) + 1)]
    for row in tables["block_c"]:
        name = "sequential" if row["model"] == "para_grpo_sequential" else "parallel"
        vals = [_fmt(v, e) for v, e in zip(row["values"], row["errored"])]
        lines.append(f"| {name} | " + " | ".join(vals) + f" | {_fmt(row['avg'])} |")
    by_name = {r["model"]: r for r in tables["block_c"]}
    if len(by_name) == 2:
        par, seq = by_name["para_grpo"], by_name["para_grpo_sequential"]
        deltas = [
            None if p is None or q is None else p - q
            for p, q in zip([*par["values"], par["avg"]], [*seq["values"], seq["avg"]])
        ]
        lines.append(
            "| parallel - sequential | "
            + " | ".join("-" if d is None else f"{d:+.1f}" for d in deltas)
            + " |"
        )
    lines += ["", "### Tool use per cell (avg_tool_calls / tool_usage_rate)", ""]
    lines += ["| Model | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    for row in tables["table1"]:
        vals = [
            "-" if a is None else f"{a:.2f} / {u:.2f}"
            for a, u in zip(row["avg_tool_calls"], row["tool_usage_rate"])
        ]
        lines.append(f"| {row['label']} | " + " | ".join(vals) + " |")
    if tables["missing"]:
        lines += ["", "## Rows not filled", ""]
        for stage, reason in tables["missing"].items():
            lines.append(f"- {STAGE_LABELS.get(stage, stage)}: {reason}")
    return "\n".join(lines) + "\n"


def draw_chart(tables: dict[str, Any], path: Path) -> None:
    """Table 1 (scores per task, block C's sequential row included) and Table 2 (f_tau, kappa)
    as bars, each labelled with its value; an empty cell is labelled "n/a", not drawn as 0."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def label(v: float | None, digits: int) -> str:
        return "n/a" if v is None else f"{v:.{digits}f}"

    rows = [r for r in tables["table1"]]
    cols = [*tables["columns"], "Avg"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5.2), gridspec_kw={"width_ratios": [3, 1]})
    width = 0.8 / max(1, len(rows))
    top = 0.0
    for i, row in enumerate(rows):
        raw = [*row["values"], row["avg"]]
        vals = [v if v is not None else 0.0 for v in raw]
        top = max(top, *vals)
        xs = [j + i * width for j in range(len(cols))]
        bars = ax1.bar(xs, vals, width, label=STAGE_LABELS.get(row["model"], row["model"]))
        ax1.bar_label(bars, [label(v, 1) for v in raw], fontsize=6, padding=1)
    ax1.set_xticks([j + 0.4 - width / 2 for j in range(len(cols))], cols, fontsize=8)
    ax1.set_ylim(0, min(100.0, max(10.0, top * 1.25)))
    ax1.set_ylabel("percent")
    ax1.set_title("Table 1 layout: score per task (block C: sequential dispatch)")
    ax1.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.08), ncol=3, frameon=False)
    t2 = tables["table2"]
    names = [SHORT_LABELS.get(r["model"], r["model"]) for r in t2]
    xs = list(range(len(t2)))
    for key, shift in (("f_tau", -0.2), ("kappa", 0.2)):
        raw = [r[key] for r in t2]
        bars = ax2.bar([x + shift for x in xs], [v or 0.0 for v in raw], 0.4, label=key)
        ax2.bar_label(bars, [label(v, 2) for v in raw], fontsize=6, padding=1)
    ax2.set_xticks(xs, names, fontsize=8)
    ax2.set_ylabel("f_tau (0-1) / kappa (calls per rollout)")
    ax2.set_title("Table 2 layout: f_tau and kappa")
    ax2.legend(fontsize=7, loc="upper left")
    ax2.margins(y=0.15)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------------------------------


def run_reproduce(config: ReproduceConfig) -> ReproduceResult:
    """Fill what can be filled, skip finished cells, and write tables.md/.json and chart.png."""
    out = config.out
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    setup = _setup_or_none()
    protocol = eval_protocol(config, setup)
    ckpts, missing = ensure_checkpoints(config)
    synth = ensure_synth(config, setup)
    from paravt.eval.synth_tasks import write_synth_tasks

    task_dir = write_synth_tasks(synth, out / "tasks", limit=config.limit)
    _log(f"offline protocol: {protocol}")
    stats = {
        "protocol": protocol,
        "temperature": setup.temperature if setup is not None else 0.7,
        "reward": setup.reward if setup is not None else None,
    }
    models: list[str] = [s for s in STAGES]
    for stage in STAGES:
        if stage in ckpts:
            run_lmms_cells(config, stage, ckpts[stage], SYNTH_COLUMNS, task_dir, protocol=protocol)
            run_train_stats(config, stage, ckpts[stage], task_dir, **stats)
    if "para_grpo" in ckpts:
        run_lmms_cells(
            config,
            "para_grpo_sequential",
            ckpts["para_grpo"],
            SYNTH_COLUMNS,
            task_dir,
            dispatch="sequential",
            protocol=protocol,
        )
        models.append("para_grpo_sequential")
    columns = SYNTH_COLUMNS
    if config.paper_splits:
        columns = PAPER_COLUMNS
        from paravt.eval.cli import paper_task_dir

        for stage in STAGES:
            if stage in ckpts:
                mcq, grounding = PAPER_COLUMNS[:-1], PAPER_COLUMNS[-1:]
                for cols, proto in ((mcq, PAPER_PROTOCOL), (grounding, PAPER_GROUNDING_PROTOCOL)):
                    run_lmms_cells(
                        config, stage, ckpts[stage], cols, paper_task_dir(), protocol=proto
                    )
    tables = build_tables(out, models, columns, missing)
    tables["seconds"] = round(time.perf_counter() - t0, 1)
    tables["checkpoints"] = {k: str(v) for k, v in ckpts.items()}
    tables["protocol"] = {**protocol, "f_tau_temperature": stats["temperature"]}
    md = out / "tables.md"
    md.write_text(render_markdown(tables, config.paper_splits), encoding="utf-8")
    js = out / "tables.json"
    js.write_text(json.dumps(tables, indent=2, default=str) + "\n", encoding="utf-8")
    chart = out / "chart.png"
    draw_chart(tables, chart)
    return ReproduceResult(md, js, chart, tables)
