"""`paravt-eval reproduce`: the paper's Table 1 and Table 2 layouts, filled from our own runs.

Offline default (what `nox -s reproduce` runs, CPU, no downloads):
1. a synthetic benchmark (`paravt-tools synth`) and its lmms-eval tasks (`write_synth_tasks`);
2. the four training stages as checkpoints: given with `--checkpoints stage=PATH,...`, or trained
   here with paravt-train's tiny recipes (base = the untrained tiny Qwen3-VL, +SFT, +SFT+GRPO,
   +SFT+PARA-GRPO); a stage that cannot be trained is reported as not filled, with the reason;
3. every (stage, task) cell through the real lmms-eval CLI with `--model paravt`, and block C (the
   PARA-GRPO checkpoint with sequential dispatch) the same way;
4. f_tau (mean format reward of rollouts at temperature 0.7) and kappa (mean executed tool calls per
   rollout) per stage, from rollouts of the same agent runtime;
5. Table 1 (one column per task plus the average), Table 2 (f_tau, kappa, accuracies per stage;
   block C sequential vs parallel) as markdown + JSON, and a PNG chart.

Each finished cell is a JSON file under `OUT/cells/`; a re-run skips it. A cell with errored
samples says how many. With `--paper-splits`, the seven paper splits run through lmms-eval's own
tasks (datasets and a GPU needed) and fill Table 1's paper columns.
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
# The seven paper splits with lmms-eval 0.7.3's own task names and headline metrics.
PAPER_COLUMNS = (
    Column("videomme", "VideoMME w/o sub", "videomme_perception_score"),
    Column("videomme_w_subtitle", "VideoMME w/ sub", "videomme_perception_score"),
    Column("longvideobench_val_v", "LongVideoBench", "lvb_acc"),
    Column("lvbench", "LVBench", "lvbench_score"),
    Column("mlvu_dev", "MLVU", "mlvu_percetion_score"),
    Column("mmvu_val", "MMVU", "accuracy"),
    Column("temporal_grounding_charades", "Charades-STA (mIoU)", "charades_sta_mIOU"),
)
# Table 1 of the paper, for reference rows (percent).
PAPER_TABLE1 = {
    "Qwen3-VL-8B (paper)": [59.9, 68.4, 52.2, 33.1, 58.3, 68.0, 49.3],
    "ParaVT-8B (paper)": [62.1, 69.4, 60.4, 39.8, 65.0, 68.6, 50.1],
}


class ReproduceConfig(BaseModel):
    """What `reproduce` runs. Defaults fit 2 CPU cores in well under 15 minutes."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    out: Path = Field(Path("runs/reproduce"), description="Output directory.")
    checkpoints: str | None = Field(
        None, description="stage=PATH pairs (base, sft, grpo, para_grpo), comma separated."
    )
    synth_dir: Path | None = Field(None, description="Existing `paravt-tools synth` directory.")
    n_videos: int = Field(6, ge=1, description="Synthetic videos to generate.")
    duration_s: float = Field(40.0, gt=0, description="Length of each synthetic video.")
    limit: int | None = Field(4, ge=1, description="Documents per synthetic task.")
    train: bool = Field(True, description="Train missing tiny stages with paravt-train.")
    paper_splits: bool = Field(False, description="Also run the seven paper splits.")
    main_nframes: int = Field(8, ge=1, description="Overview frames in the offline protocol.")
    max_new_tokens: int = Field(96, ge=1, description="Tokens per turn in the offline protocol.")
    ftau_rollouts: int = Field(4, ge=1, description="Rollouts per stage for f_tau and kappa.")
    batch_size: int = Field(4, ge=1, description="Samples generated together (lmms-eval runs).")
    device: str = "cpu"


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


def ensure_synth(config: ReproduceConfig) -> Path:
    """The synthetic benchmark directory, generated with `paravt-tools synth` if needed."""
    if config.synth_dir is not None:
        return config.synth_dir
    synth = config.out / "synth"
    if any(synth.glob("*.parquet")):
        return synth
    _log(f"generating {config.n_videos} synthetic videos of {config.duration_s:g} s in {synth}")
    cmd = [
        sys.executable,
        "-m",
        "paravt.tools.cli",
        "synth",
        "--out",
        str(synth),
        "--n",
        str(config.n_videos),
        "--duration",
        f"{config.duration_s:g}",
        "--seed",
        "0",
    ]
    code, tail = _run(cmd, config.out / "logs" / "synth.log")
    if code != 0:
        raise RuntimeError(f"paravt-tools synth failed (exit {code}):\n{tail}")
    return synth


def ensure_checkpoints(
    config: ReproduceConfig, synth: Path
) -> tuple[dict[str, Path], dict[str, str]]:
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
        reason = train_stage(config, stage, ckpts[parent], synth)
        if reason is None and (final / "config.json").is_file():
            ckpts[stage] = final
        else:
            missing[stage] = reason or f"training wrote no checkpoint at {final}"
    return ckpts, missing


def train_stage(config: ReproduceConfig, stage: str, init: Path, synth: Path) -> str | None:
    """Train one tiny stage with paravt-train; None on success, else why it failed."""
    try:
        import paravt.train  # noqa: F401
    except ImportError:
        return "paravt-train is not installed (pip install 'paravt-eval[train]')"
    command, recipe = TRAIN_RECIPES[stage]
    out = config.out / "train" / stage
    kind = "sft" if command == "sft" else "rl"
    cmd = [
        sys.executable,
        "-m",
        "paravt.train",
        command,
        recipe,
        f"output_dir={out}",
        f"model.path={init}",
        "model.build_tiny=false",
        f"data.parquet=[{synth / (kind + '.parquet')}]",
        "data.synth=null",
    ]
    _log(f"training {STAGE_LABELS[stage]} from {init}")
    code, tail = _run(cmd, config.out / "logs" / f"train_{stage}.log")
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
) -> None:
    """Evaluate every missing (model, task) cell with one lmms-eval CLI run."""
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
        f"main_nframes={config.main_nframes}",
        f"max_new_tokens={config.max_new_tokens}",
        f"dispatch={dispatch}",
        f"device={config.device}",
        f"traces={traces}",
    ]
    if include_path is not None:  # offline tasks: the cheap CPU protocol
        args += ["subagent_max_new_tokens=32", "max_pixels=4096"]
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


def run_train_stats(config: ReproduceConfig, stage: str, ckpt: Path, task_dir: Path) -> None:
    """f_tau and kappa of one checkpoint: rollouts at temperature 0.7 on the MCQ and OE tasks."""
    path = _cell_path(config.out, stage, "train_stats")
    if path.is_file():
        return
    from paravt.eval.agent import EvalAgent, VideoQuestion, options_from
    from paravt.eval.config import EvalConfig
    from paravt.rewards import RewardConfig, score

    docs: list[dict[str, Any]] = []
    for name in ("paravt_synth_mcq", "paravt_synth_oe"):
        f = task_dir / f"{name}.jsonl"
        if f.is_file():
            docs += [json.loads(line) for line in f.read_text(encoding="utf-8").splitlines()]
    docs = docs[: config.ftau_rollouts]
    eval_config = EvalConfig(
        pretrained=str(ckpt),
        main_nframes=config.main_nframes,
        max_new_tokens=config.max_new_tokens,
        subagent_max_new_tokens=32,
        max_pixels=4096,
        temperature=0.7,
        device=config.device,
        batch_size=max(1, len(docs)),
    )
    _log(f"{stage}: {len(docs)} rollouts at temperature 0.7 for f_tau and kappa")
    agent = EvalAgent(eval_config)
    samples = [
        VideoQuestion(
            key=d["id"],
            video=d["video"],
            question=d["question"],
            options=options_from(d.get("paravt_options")),
            task="train_stats",
            doc_id=i,
        )
        for i, d in enumerate(docs)
    ]
    traces = agent.run(samples)
    reward_config = RewardConfig()
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
        "rollouts": len(fmt),
        "errored": errored,
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
        table2.append({**row, "f_tau": stats.get("f_tau"), "kappa": stats.get("kappa")})
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
        "f_tau: mean format reward of rollouts at temperature 0.7; kappa: mean executed "
        "crop_video calls per rollout.",
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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in tables["table1"]]
    cols = [*tables["columns"], "Avg"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.5), gridspec_kw={"width_ratios": [3, 1]})
    width = 0.8 / max(1, len(rows))
    for i, row in enumerate(rows):
        vals = [v if v is not None else 0.0 for v in [*row["values"], row["avg"]]]
        xs = [j + i * width for j in range(len(cols))]
        ax1.bar(xs, vals, width, label=STAGE_LABELS.get(row["model"], row["model"]))
    ax1.set_xticks([j + 0.4 - width / 2 for j in range(len(cols))], cols, fontsize=8)
    ax1.set_ylim(0, 100)
    ax1.set_ylabel("percent (missing cells drawn as 0)")
    ax1.set_title("Table 1 layout: per-task score")
    ax1.legend(fontsize=7)
    t2 = tables["table2"]
    names = [SHORT_LABELS.get(r["model"], r["model"]) for r in t2]
    xs = list(range(len(t2)))
    ax2.bar([x - 0.2 for x in xs], [r["f_tau"] or 0.0 for r in t2], 0.4, label="f_tau")
    ax2.bar([x + 0.2 for x in xs], [r["kappa"] or 0.0 for r in t2], 0.4, label="kappa")
    ax2.set_xticks(xs, names, fontsize=8)
    ax2.set_title("Table 2 layout: f_tau and kappa")
    ax2.legend(fontsize=7)
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
    synth = ensure_synth(config)
    from paravt.eval.synth_tasks import write_synth_tasks

    task_dir = write_synth_tasks(synth, out / "tasks", limit=config.limit)
    ckpts, missing = ensure_checkpoints(config, synth)
    models: list[str] = [s for s in STAGES]
    for stage in STAGES:
        if stage in ckpts:
            run_lmms_cells(config, stage, ckpts[stage], SYNTH_COLUMNS, task_dir)
            run_train_stats(config, stage, ckpts[stage], task_dir)
    if "para_grpo" in ckpts:
        run_lmms_cells(
            config,
            "para_grpo_sequential",
            ckpts["para_grpo"],
            SYNTH_COLUMNS,
            task_dir,
            dispatch="sequential",
        )
        models.append("para_grpo_sequential")
    columns = SYNTH_COLUMNS
    if config.paper_splits:
        columns = PAPER_COLUMNS
        for stage in STAGES:
            if stage in ckpts:
                run_lmms_cells(config, stage, ckpts[stage], PAPER_COLUMNS, None)
    tables = build_tables(out, models, columns, missing)
    tables["seconds"] = round(time.perf_counter() - t0, 1)
    tables["checkpoints"] = {k: str(v) for k, v in ckpts.items()}
    md = out / "tables.md"
    md.write_text(render_markdown(tables, config.paper_splits), encoding="utf-8")
    js = out / "tables.json"
    js.write_text(json.dumps(tables, indent=2, default=str) + "\n", encoding="utf-8")
    chart = out / "chart.png"
    draw_chart(tables, chart)
    return ReproduceResult(md, js, chart, tables)
