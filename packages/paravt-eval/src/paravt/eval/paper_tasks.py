"""The `paravt_paper` lmms-eval task group: the paper's seven splits as the released driver ran them.

One task per split (`paravt_paper_videomme`, `..._videomme_wsub`, `..._longvideobench`,
`..._lvbench`, `..._mlvu`, `..._mmvu`, `..._charades`), shipped in
`paravt/eval/lmms_tasks/paravt_paper/` (`paravt-eval tasks --paper` prints the `--include_path`).
Each task loads the driver's dataset and split, finds each video where the driver looks for it
(`utils.load_samples` of EvolvingLMMs-Lab/ParaVT; HF_HOME-relative, see each YAML), lays the
question out with the driver's template, and scores with the driver's rules: the option letter of
`extract_letter` against the answer (accuracy, plus Video-MME's short/medium/long), Charades-STA
mIoU and R@0.3/0.5/0.7 of `extract_time_from_response`, plus `avg_tool_calls`, `tool_usage_rate`
and `errored` from the traces. Every sample counts: an errored one is wrong (IoU 0 on Charades-STA,
where the driver's summary left errored samples out; `errored` says how many, the traces'
summary why).

`process_docs_*` add the fields the paravt model reads (`paravt_question`, `paravt_answer_kind`,
`paravt_answer`, `paravt_video`): under `protocol=paper` the model adds the mode's MCQ instruction
(the driver's direct mode has its own) and the agentic video-path suffix itself, so the requests
are the driver's, and grounding questions take the driver's Charades mode (agentic_minimal) unless
a prompt mode is given. Other models get `doc_to_text`: the driver's text with its default
instruction.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from paravt.core import (
    PAPER_GROUNDING_TEMPLATE,
    PAPER_MCQ_INSTRUCTION,
    PAPER_SUBTITLE_PREFIX,
    driver_iou,
    driver_letter,
    driver_span,
)
from paravt.eval.metrics import tool_scores

SPLITS = (
    "videomme",
    "videomme_wsub",
    "longvideobench",
    "lvbench",
    "mlvu",
    "mmvu",
    "charades",
)
RECALL = (0.3, 0.5, 0.7)


def paper_task_dir() -> Path:
    """The shipped `paravt_paper` task directory (for lmms-eval's `--include_path`)."""
    return Path(str(resources.files("paravt.eval") / "lmms_tasks" / "paravt_paper"))


def hf_home() -> Path:
    return Path(os.environ.get("HF_HOME", os.path.expanduser("~/.cache/huggingface")))


def _options_text(options: list[Any]) -> str:
    return "\n".join(f"{chr(65 + i)}. {o}" for i, o in enumerate(options))


def _mcq_body(question: str, options_text: str, prefix: str = "") -> str:
    return f"{prefix}Question: {question}\nOptions:\n{options_text}"


def parse_srt(path: Path) -> str:
    """Subtitle text of an `.srt` file as the driver reads it (`utils.parse_srt`): every block's
    lines after its index and time line, tags stripped, blank lines dropped; '' when missing."""
    if not path.is_file():
        return ""
    try:
        content = path.read_text(encoding="utf-8", errors="ignore")
    except OSError:
        return ""
    lines: list[str] = []
    for block in re.split(r"\n\s*\n", content.strip()):
        parts = block.strip().split("\n")
        if len(parts) >= 3:
            for line in parts[2:]:
                clean = re.sub(r"<[^>]+>", "", line).strip()
                if clean:
                    lines.append(clean)
    return "\n".join(lines)


# ------------------------------------------------------------------------- documents, per split


def _videomme(doc: dict[str, Any], subtitles: bool) -> dict[str, Any]:
    options = doc.get("options", [])
    text = _options_text(options) if isinstance(options, list) else str(options)
    root = hf_home() / "videomme"
    prefix = ""
    if subtitles:
        sub = parse_srt(root / "subtitle" / f"{doc['videoID']}.srt")
        prefix = PAPER_SUBTITLE_PREFIX.format(subtitles=sub) if sub else ""
    return {
        "paravt_question": _mcq_body(doc["question"], text, prefix),
        "paravt_answer_kind": "mcq",
        "paravt_answer": str(doc.get("answer", "")),
        "paravt_video": str(root / "data" / f"{doc['videoID']}.mp4"),
    }


def _longvideobench(doc: dict[str, Any]) -> dict[str, Any]:
    options = [
        doc.get(f"option{i}", "")
        for i in range(5)
        if doc.get(f"option{i}", "") and doc.get(f"option{i}") != "N/A"
    ]
    choice = doc.get("correct_choice", -1)
    return {
        "paravt_question": _mcq_body(doc["question"], _options_text(options)),
        "paravt_answer_kind": "mcq",
        "paravt_answer": chr(65 + choice) if isinstance(choice, int) and choice >= 0 else "?",
        "paravt_video": str(
            hf_home() / "datasets" / "longvideobench" / "videos" / doc["video_path"]
        ),
    }


def _lvbench(doc: dict[str, Any]) -> dict[str, Any]:
    return {
        "paravt_question": doc["question"],  # LVBench's question already lists its options
        "paravt_answer_kind": "mcq",
        "paravt_answer": str(doc.get("answer", "")),
        "paravt_video": str(hf_home() / "lvbench" / doc["video_path"]),
    }


def _mlvu(doc: dict[str, Any]) -> dict[str, Any]:
    options = doc.get("candidates", [])
    text = _options_text(options) if isinstance(options, list) else str(options)
    answer = "?"
    if isinstance(options, list):
        for j, option in enumerate(options):
            if str(option).strip() == str(doc.get("answer", "")).strip():
                answer = chr(65 + j)
                break
    root = Path(os.environ.get("PARAVT_MLVU_VIDEO_DIR", str(hf_home() / "MLVU" / "video")))
    return {
        "paravt_question": _mcq_body(doc["question"], text),
        "paravt_answer_kind": "mcq",
        "paravt_answer": answer,
        "paravt_video": str(root / doc["video_name"]),
    }


def _mmvu(doc: dict[str, Any]) -> dict[str, Any]:
    choices = doc.get("choices") or {}
    if isinstance(choices, str):
        choices = json.loads(choices) if choices.strip() else {}
    text = "\n".join(f"{k}. {v}" for k, v in sorted(choices.items()) if v not in (None, ""))
    url = str(doc["video"])
    if "/main/" in url:
        relative = url.split("/main/", 1)[1]
    elif url.startswith(("http://", "https://")):
        raise ValueError(f"unexpected MMVU video field (no /main/ marker): {url!r}")
    else:
        relative = url
    return {
        "paravt_question": _mcq_body(doc["question"], text),
        "paravt_answer_kind": "mcq",
        "paravt_answer": str(doc.get("answer", "")).strip(),
        # resolved against PARAVT_MMVU_VIDEO_DIR or the dataset snapshot in doc_to_visual
        "paravt_video": "mmvu:" + relative,
    }


def _charades(doc: dict[str, Any]) -> dict[str, Any]:
    ts = doc["timestamp"]
    if isinstance(ts, str):
        ts = json.loads(ts)
    return {
        "paravt_question": doc["caption"],
        "paravt_answer_kind": "grounding",
        "paravt_answer": json.dumps([float(ts[0]), float(ts[1])]),
        "paravt_video": str(hf_home() / "charades_sta" / "Charades_v1_480" / doc["video"]),
    }


_MAKERS = {
    "videomme": lambda d: _videomme(d, subtitles=False),
    "videomme_wsub": lambda d: _videomme(d, subtitles=True),
    "longvideobench": _longvideobench,
    "lvbench": _lvbench,
    "mlvu": _mlvu,
    "mmvu": _mmvu,
    "charades": _charades,
}


def _process_docs(split: str) -> Callable[[Any], Any]:
    """One split's `process_docs`: the dataset with `_MAKERS[split]`'s paravt fields added to
    every document."""

    def process_docs(dataset: Any) -> Any:
        return dataset.map(_MAKERS[split], load_from_cache_file=False)

    process_docs.__name__ = process_docs.__qualname__ = f"process_docs_{split}"
    return process_docs


# named by the task YAMLs (`process_docs: !function paravt.eval.paper_tasks.process_docs_<split>`)
process_docs_videomme = _process_docs("videomme")
process_docs_videomme_wsub = _process_docs("videomme_wsub")
process_docs_longvideobench = _process_docs("longvideobench")
process_docs_lvbench = _process_docs("lvbench")
process_docs_mlvu = _process_docs("mlvu")
process_docs_mmvu = _process_docs("mmvu")
process_docs_charades = _process_docs("charades")


# ------------------------------------------------------------------------------- task functions

_MMVU_ROOT: Path | None = None


def _mmvu_root() -> Path:
    global _MMVU_ROOT
    if _MMVU_ROOT is None:
        env = os.environ.get("PARAVT_MMVU_VIDEO_DIR")
        if env:
            _MMVU_ROOT = Path(env)
        else:  # the driver's default: the videos of the dataset snapshot (~30 GB the first time)
            from huggingface_hub import snapshot_download

            _MMVU_ROOT = Path(
                snapshot_download(
                    repo_id="yale-nlp/MMVU",
                    repo_type="dataset",
                    allow_patterns=["videos/**"],
                    cache_dir=str(hf_home() / "hub"),
                )
            )
    return _MMVU_ROOT


def video_path(doc: dict[str, Any]) -> str:
    """The document's video where the driver looks for it; `FileNotFoundError` naming the path and
    the fix when it is missing (the sample is then errored, not the run)."""
    located = str(doc["paravt_video"])
    if located.startswith("mmvu:"):
        located = str(_mmvu_root() / located.removeprefix("mmvu:"))
    if not Path(located).is_file():
        raise FileNotFoundError(
            f"video {located} does not exist; download the split's videos there (see the "
            "paravt_paper task YAML) or set HF_HOME / PARAVT_MLVU_VIDEO_DIR / PARAVT_MMVU_VIDEO_DIR"
        )
    return located


def doc_to_visual(doc: dict[str, Any]) -> list[str]:
    return [video_path(doc)]


def doc_to_text(
    doc: dict[str, Any], lmms_eval_specific_kwargs: dict[str, Any] | None = None
) -> str:
    """The driver's question text (with its default MCQ instruction), for models other than
    paravt; the paravt model lays the question out from the `paravt_*` fields itself."""
    if doc["paravt_answer_kind"] == "grounding":
        return PAPER_GROUNDING_TEMPLATE.format(caption=doc["paravt_question"])
    return f"{doc['paravt_question']}\n{PAPER_MCQ_INSTRUCTION}"


def doc_to_target(doc: dict[str, Any]) -> str:
    return str(doc["paravt_answer"])


def _response(results: list[Any]) -> str:
    first = results[0] if results else ""
    return first if isinstance(first, str) else str(first)


def process_mcq(doc: dict[str, Any], results: list[Any]) -> dict[str, Any]:
    """accuracy: the driver's letter equals the answer (an errored sample counts as wrong, as in
    the driver); Video-MME rows also score acc_short/medium/long (None elsewhere)."""
    correct = float(driver_letter(_response(results)) == doc["paravt_answer"])
    out: dict[str, Any] = {"accuracy": correct, **tool_scores(doc)}
    duration = doc.get("duration")
    for group in ("short", "medium", "long"):
        out[f"acc_{group}"] = correct if duration == group else None
    return out


def process_grounding(doc: dict[str, Any], results: list[Any]) -> dict[str, Any]:
    """mIoU and R@k of the driver's span against the ground truth; an errored sample (its answer
    is empty) scores IoU 0 (the driver's Charades summary left errored samples out)."""
    span = driver_span(_response(results))
    iou = driver_iou(span, json.loads(doc["paravt_answer"])) if span else 0.0
    out: dict[str, Any] = {"miou": iou, **tool_scores(doc)}
    for k in RECALL:
        out[f"r@{k}"] = float(iou >= k)
    return out


def mean_present(values: list[Any]) -> float:
    """The mean of the values that are not None (NaN when there are none)."""
    kept = [float(v) for v in values if v is not None]
    return sum(kept) / len(kept) if kept else float("nan")


def count(values: list[Any]) -> int:
    return int(sum(float(v) for v in values if v is not None))
