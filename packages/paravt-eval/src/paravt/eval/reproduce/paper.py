"""Table 1 on the paper's seven splits: given checkpoints through the real lmms-eval CLI.

`--paper-splits --checkpoints base=PATH,...,para_grpo=PATH` runs each checkpoint on the
`paravt_paper` task group (the released driver's datasets, question layout and scoring) under
protocol=paper in one lmms-eval run: agentic_general for the MCQ splits, agentic_minimal for
Charades-STA (the protocol's mode for grounding questions), as the released driver ran them. A stage
may be served instead (`para_grpo=http://a:8000/v1|http://b:8000/v1`, vLLM or SGLang): its splits
then run over the servers as a rolling pool with the driver's limits, and Charades-STA's video is
decoded by the server (the driver's video_url channel). A local checkpoint takes images, so there
Charades-STA's overview is 64 frames like the other splits, and the table says so. It needs the
datasets (and, for local checkpoints, a GPU); each (checkpoint, task) cell is a JSON file under
`OUT/paper_cells/` (with its errored count and reasons) and is never re-run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paravt.core.engines import served_model_name
from paravt.eval.paper_tasks import paper_task_dir
from paravt.eval.reproduce.progress import log

STAGES = ("base", "sft", "grpo", "para_grpo")


@dataclass(frozen=True)
class Column:
    task: str  # lmms-eval task name
    label: str
    metric: str  # key in lmms-eval's results[task] (without the ",none" filter suffix)


PAPER_COLUMNS = (
    Column("paravt_paper_videomme", "VideoMME w/o sub", "accuracy"),
    Column("paravt_paper_videomme_wsub", "VideoMME w/ sub", "accuracy"),
    Column("paravt_paper_longvideobench", "LongVideoBench", "accuracy"),
    Column("paravt_paper_lvbench", "LVBench", "accuracy"),
    Column("paravt_paper_mlvu", "MLVU", "accuracy"),
    Column("paravt_paper_mmvu", "MMVU", "accuracy"),
    Column("paravt_paper_charades", "Charades-STA (mIoU)", "miou"),
)
# No prompt_mode: the paper protocol's own (agentic_general, grounding agentic_minimal). No
# video_channel: video_url is for servers, and these are local checkpoints.
PAPER_PROTOCOL = {"protocol": "paper"}
CHANNEL_NOTE = (
    "Charades-STA: overview frames as images (the paper's run let its vLLM server decode the "
    "video, the video_url channel, which a local checkpoint cannot take)."
)
# Table 1 of the paper, for reference rows (percent).
PAPER_TABLE1 = {
    "Qwen3-VL-8B (paper)": [59.9, 68.4, 52.2, 33.1, 58.3, 68.0, 49.3],
    "ParaVT-8B (paper)": [62.1, 69.4, 60.4, 39.8, 65.0, 68.6, 50.1],
}


@dataclass(frozen=True)
class Servers:
    """A stage served by OpenAI-compatible servers: `base_url` as EvalConfig takes it (several
    URLs joined by '|')."""

    base_url: str

    def model_name(self) -> str:
        """The served model's name: the first of `GET /models` on the first server."""

        try:
            return served_model_name(self.base_url.split("|")[0].strip())
        except RuntimeError as exc:
            raise ValueError(f"--checkpoints: {exc}") from None


Source = Path | Servers


def parse_checkpoints(text: str | None) -> dict[str, Source]:
    """`base=PATH,para_grpo=http://a:8000/v1|http://b:8000/v1` -> {stage: checkpoint directory or
    servers}; unknown stages, missing directories and non-URLs are errors."""
    out: dict[str, Source] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        stage, sep, value = item.partition("=")
        stage, value = stage.strip(), value.strip()
        if not sep or stage not in STAGES:
            raise ValueError(
                f"--checkpoints entry {item!r}: expected stage=PATH or stage=URL with stage one "
                f"of {', '.join(STAGES)}"
            )
        if value.startswith(("http://", "https://")):
            out[stage] = Servers(value)
            continue
        p = Path(value).expanduser()
        if not p.is_dir():
            raise ValueError(
                f"--checkpoints {stage}: {p} is not a checkpoint directory (a served model: "
                "give its URL, http://host:port/v1, several joined by '|')"
            )
        out[stage] = p
    return out


def _run(cmd: list[str], log_path: Path) -> tuple[int, str]:
    """Run `cmd` offline, streaming its output to `log_path`; the exit code and the output's tail."""
    env = dict(os.environ)
    for key in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        env.setdefault(key, "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("w", encoding="utf-8") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, check=False)
    lines = log_path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    return proc.returncode, "\n".join(lines[-6:])


def _cell_path(out: Path, model: str, task: str) -> Path:
    return out / "paper_cells" / f"{model}__{task}.json"


def _metric(values: dict[str, Any], name: str) -> float | None:
    for key in (f"{name},none", name):
        v = values.get(key)
        if isinstance(v, (int, float)):
            return float(v)
    return None


def run_lmms_cells(
    out: Path,
    model: str,
    checkpoint: Source,
    columns: tuple[Column, ...],
    protocol: dict[str, Any],
    *,
    device: str = "cuda",
    batch_size: int = 8,
    run_name: str | None = None,
) -> None:
    """Evaluate every missing (model, task) cell of `columns` with one lmms-eval CLI run: a local
    checkpoint through transformers (lockstep batches of `batch_size` on `device`), or servers
    (a rolling pool over them, the driver's in-flight limit and timeout; no transformers)."""

    todo = [c for c in columns if not _cell_path(out, model, c.task).is_file()]
    if not todo:
        return
    name = run_name or model
    run_dir = out / "lmms" / name
    if isinstance(checkpoint, Servers):
        args = [f"base_url={checkpoint.base_url}", f"model={checkpoint.model_name()}"]
    else:
        args = [f"pretrained={checkpoint}", f"device={device}"]
    args += [f"{k}={v}" for k, v in protocol.items()]
    args += [f"traces={out / 'traces' / f'{name}.jsonl'}"]
    cmd = [sys.executable, "-m", "lmms_eval", "--model", "paravt"]
    cmd += ["--model_args", ",".join(args), "--tasks", ",".join(c.task for c in todo)]
    cmd += ["--output_path", str(run_dir), "--log_samples"]
    if not isinstance(checkpoint, Servers):
        cmd += ["--batch_size", str(batch_size)]
    cmd += ["--include_path", str(paper_task_dir())]
    log(f"{model}: lmms-eval on {', '.join(c.task for c in todo)}")
    t0 = time.perf_counter()
    log_path = out / "logs" / f"lmms_{name}.log"
    code, tail = _run(cmd, log_path)
    files = sorted(run_dir.rglob("*_results.json"), key=lambda p: p.stat().st_mtime)
    if code != 0 or not files:  # lmms-eval can exit 0 without results
        raise RuntimeError(f"lmms-eval for {model} failed (exit {code}); see {log_path}:\n{tail}")
    results = json.loads(files[-1].read_text(encoding="utf-8"))
    summary_path = out / "traces" / f"{name}.summary.json"
    summary = json.loads(summary_path.read_text(encoding="utf-8")) if summary_path.is_file() else {}
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
            "errors": summary.get(c.task, {}).get("errors", {}),
            "samples": results.get("n-samples", {}).get(c.task, {}).get("effective"),
            "seconds": round(time.perf_counter() - t0, 1),
        }
        path = _cell_path(out, model, c.task)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(cell, indent=2) + "\n", encoding="utf-8")


def run_paper_splits(out: Path, checkpoints: str | None, device: str) -> list[str]:
    """Fill Table 1 for the given checkpoints; its markdown lines."""
    ckpts = parse_checkpoints(checkpoints)
    if not ckpts:
        raise ValueError(
            "--paper-splits needs --checkpoints stage=PATH,... (base, sft, grpo, para_grpo)"
        )
    for stage, source in ckpts.items():
        # one lmms-eval run per stage; a served stage's Charades-STA goes over the video_url
        # channel by itself (the paper protocol's grounding channel for servers)
        run_lmms_cells(out, stage, source, PAPER_COLUMNS, PAPER_PROTOCOL, device=device)
    served = [s for s, src in ckpts.items() if isinstance(src, Servers)]
    return render_table1(out, list(ckpts), served=served)


def render_table1(out: Path, models: list[str], served: list[str] | None = None) -> list[str]:
    cols = [c.label for c in PAPER_COLUMNS]
    lines = ["## Table 1: the paper's seven splits (percent; mIoU for Charades-STA)", ""]
    lines += ["| Model | " + " | ".join(cols) + " | Avg |", "|---|" + "---|" * (len(cols) + 1)]
    errored: list[str] = []
    for model in models:
        values: list[float | None] = []
        for c in PAPER_COLUMNS:
            path = _cell_path(out, model, c.task)
            cell = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
            v = cell.get("value")
            values.append(None if v is None else (v * 100 if v <= 1 else v))
            if cell.get("errored"):
                reasons = ", ".join(f"{r} x{e['count']}" for r, e in cell.get("errors", {}).items())
                errored.append(f"{model} {c.label}: {cell['errored']} ({reasons or 'see traces'})")
        filled = [v for v in values if v is not None]
        avg = f"{sum(filled) / len(filled):.1f}" if len(filled) == len(values) else "-"
        cells = ["-" if v is None else f"{v:.1f}" for v in values]
        lines.append(f"| {model} | " + " | ".join(cells) + f" | {avg} |")
    for name, vals in PAPER_TABLE1.items():
        cells = [f"{v:.1f}" for v in vals]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {sum(vals) / len(vals):.1f} |")
    served = served or []
    local = [m for m in models if m not in served]
    note = f"Protocol: paper. Served ({', '.join(served)}): " if served else "Protocol: paper. "
    if served:
        note += "Charades-STA through the video_url channel, as the driver ran it. "
    if local:
        note += (f"Local checkpoints ({', '.join(local)}): " if served else "") + CHANNEL_NOTE
    lines += ["", note.strip()]
    if errored:
        lines += ["", "Errored samples (scored wrong): " + "; ".join(errored) + "."]
    return [*lines, ""]
