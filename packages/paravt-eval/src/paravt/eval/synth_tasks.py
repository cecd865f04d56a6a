"""The offline lmms-eval tasks `paravt_synth_mcq`, `paravt_synth_grounding`, `paravt_synth_oe`.

`write_synth_tasks(synth_dir)` turns a directory written by `paravt-tools synth` (videos plus RL
parquet in the reference schema) into an lmms-eval task directory: the three task YAMLs shipped in
`paravt/eval/lmms_tasks/paravt_synth/` and one JSONL of documents per task beside them. Then

    python -m lmms_eval --model paravt --model_args pretrained=CKPT \\
        --tasks paravt_synth_mcq --include_path SYNTH_DIR/lmms_eval_tasks

The task YAMLs name the functions below (`doc_to_visual`, `doc_to_text`, `process_*`) by their
module path, so the copies work wherever they are written.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Any

from paravt.core import content_text, format_question
from paravt.eval.metrics import grounding_scores, mcq_score, open_ended_score, tool_scores

TASKS = {
    "mcq": "paravt_synth_mcq",
    "tvg": "paravt_synth_grounding",
    "oe": "paravt_synth_oe",
}
TASK_NAMES = tuple(TASKS.values())
QUESTION_TYPE_ALIASES = {"grounding": "tvg", "temporal_grounding": "tvg", "open": "oe"}
# what the paravt model reads to prompt and grade each task's answers (`lmms_model.answer_kind_of`)
ANSWER_KINDS = {"mcq": "mcq", "tvg": "grounding", "oe": "open"}


def answer_kind_of_type(question_type: object) -> str | None:
    """The answer kind (`mcq`, `grounding`, `open`) a question type asks for, aliases accepted
    (`open`, `grounding`, `temporal_grounding`); None for any other type."""
    if not isinstance(question_type, str):
        return None
    qtype = question_type.strip().lower()
    return ANSWER_KINDS.get(QUESTION_TYPE_ALIASES.get(qtype, qtype))


VIDEO_PLACEHOLDER = "<video>"
DEFAULT_TASK_DIR = "lmms_eval_tasks"


class SynthDataError(ValueError):
    """A synthetic-data directory that cannot become tasks; the message names the file and row."""


# --------------------------------------------------------------------------------------------------
# Functions the task YAMLs call


def doc_to_visual(doc: dict[str, Any]) -> list[str]:
    """The sample's own video (an absolute path written by `write_synth_tasks`)."""
    return [doc["video"]]


def doc_to_text(
    doc: dict[str, Any], lmms_eval_specific_kwargs: dict[str, Any] | None = None
) -> str:
    """The question, with lettered options for multiple choice."""
    return format_question(doc["question"], _options(doc))


def _options(doc: dict[str, Any]) -> list[str] | None:
    raw = doc.get("paravt_options")
    if not raw:
        return None
    return list(json.loads(raw)) if isinstance(raw, str) else list(raw)


def _prediction(results: list[Any]) -> str:
    first = results[0] if results else ""
    return first if isinstance(first, str) else str(first)


def process_mcq(doc: dict[str, Any], results: list[Any]) -> dict[str, float]:
    """accuracy (option letter or option text) plus the tool-use scores of the sample."""
    return {
        "accuracy": mcq_score(_prediction(results), doc["answer"], _options(doc)),
        **tool_scores(doc),
    }


def process_oe(doc: dict[str, Any], results: list[Any]) -> dict[str, float]:
    """accuracy (normalised exact match, else token F1) plus the tool-use scores."""
    return {"accuracy": open_ended_score(_prediction(results), doc["answer"]), **tool_scores(doc)}


def process_grounding(doc: dict[str, Any], results: list[Any]) -> dict[str, float]:
    """miou and r@0.3/0.5/0.7 of the predicted `[start, end]` plus the tool-use scores."""
    return {**grounding_scores(_prediction(results), doc["answer"]), **tool_scores(doc)}


# --------------------------------------------------------------------------------------------------
# From `paravt-tools synth` output to task documents


def _json(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _resolve(path: str, base: Path) -> Path:
    raw = path.removeprefix("file://")
    p = Path(raw)
    return p if p.is_absolute() else (base / p).resolve()


def synth_documents(synth_dir: str | Path) -> dict[str, list[dict[str, Any]]]:
    """Task name -> documents, from every RL parquet file under `synth_dir`.

    A document: `id`, `video` (absolute path), `question`, `answer`, `question_type`,
    `paravt_answer_kind` (`mcq`, `grounding` or `open`), and
    `paravt_options` (JSON list) when `extra_info` lists the question and its options apart
    (otherwise the question is the prompt's user text, options included). Rows of other question types are
    left out. Raises `SynthDataError` naming the file and row of a malformed row or a missing video.
    """
    import pyarrow.parquet as pq

    root = Path(synth_dir)
    files = sorted(p for p in root.rglob("*.parquet") if "sft" not in p.name.lower())
    if not files:
        raise SynthDataError(
            f"{root}: no RL parquet files found; create them with "
            f"`paravt-tools synth --out {root} --n 16 --duration 60 --seed 0`"
        )
    docs: dict[str, list[dict[str, Any]]] = {name: [] for name in TASK_NAMES}
    for path in files:
        table = pq.read_table(str(path))
        names = set(table.schema.names)
        if not {"prompt", "videos", "extra_info"} <= names:
            continue  # not an RL file (e.g. an SFT file under another name)
        rows = table.to_pylist()
        for i, row in enumerate(rows):
            where = f"{path.name} row {i}"
            info = _json(row["extra_info"])
            if not isinstance(info, dict) or info.get("answer") is None:  # null in a struct column
                raise SynthDataError(f"{where}: extra_info has no 'answer' (or a null one)")
            qtype = str(info.get("question_type", "oe")).lower()
            qtype = QUESTION_TYPE_ALIASES.get(qtype, qtype)
            if qtype not in TASKS:
                continue
            videos = _json(row["videos"]) or []
            first = videos[0] if videos else None
            vpath = first.get("video") if isinstance(first, dict) else first
            if not isinstance(vpath, str) or not vpath:
                raise SynthDataError(f"{where}: videos has no video path")
            video = _resolve(vpath, path.parent)
            if not video.is_file():
                raise SynthDataError(f"{where}: video {video} does not exist")
            messages = _json(row["prompt"])
            users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
            if not users:
                raise SynthDataError(f"{where}: prompt has no user message")
            options = info.get("options") or None
            question = info.get("question")
            if not isinstance(question, str) or not question.strip():
                # only the prompt: its text already lists any options
                question = (
                    content_text(users[-1].get("content")).replace(VIDEO_PLACEHOLDER, "").strip()
                )
                options = None
            answer = info["answer"]
            if isinstance(answer, (list, tuple)):
                answer = json.dumps(list(answer))
            doc: dict[str, Any] = {
                "id": str(info.get("id") or info.get("index") or f"{path.stem}:{i}"),
                "video": str(video),
                "question": question,
                "answer": str(answer),
                "question_type": qtype,
                "paravt_answer_kind": ANSWER_KINDS[qtype],
                "paravt_options": json.dumps(list(options)) if options else "",
            }
            docs[TASKS[qtype]].append(doc)
    return docs


def _write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> int:
    n = 0
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
            n += 1
    return n


def write_synth_tasks(
    synth_dir: str | Path, out_dir: str | Path | None = None, *, limit: int | None = None
) -> Path:
    """Write the three task YAMLs and their documents; return the directory for `--include_path`.

    `out_dir` defaults to `SYNTH_DIR/lmms_eval_tasks`; `limit` keeps the first N documents of each
    task. A task without documents is not written (and its files from an earlier call into
    `out_dir` are removed). Raises `SynthDataError` when no task has documents.
    """
    if limit is not None and limit < 1:
        raise ValueError(
            f"limit must be at least 1 document per task (or None for all), got {limit}"
        )
    synth = Path(synth_dir)
    out = Path(out_dir) if out_dir is not None else synth / DEFAULT_TASK_DIR
    out.mkdir(parents=True, exist_ok=True)
    docs = synth_documents(synth)
    empty = [name for name, rows in docs.items() if not rows]
    if len(empty) == len(docs):
        raise SynthDataError(f"{synth}: no mcq, tvg or oe rows in its RL parquet files")
    shipped = resources.files("paravt.eval") / "lmms_tasks" / "paravt_synth"
    for entry in shipped.iterdir():
        if entry.name.endswith(".yaml") or entry.name.endswith("_yaml"):
            task = entry.name.removesuffix(".yaml")
            if task in docs and not docs[task]:
                # a task without documents would fail to load; one an earlier call wrote here
                # would be evaluated on that call's documents: both files go
                (out / entry.name).unlink(missing_ok=True)
                (out / f"{task}.jsonl").unlink(missing_ok=True)
                continue
            with resources.as_file(entry) as src:
                shutil.copyfile(src, out / entry.name)
    for name, rows in docs.items():
        if rows:
            _write_jsonl(out / f"{name}.jsonl", rows[:limit] if limit else rows)
    return out
