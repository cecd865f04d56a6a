"""Scores of single samples and their aggregates: accuracy, mIoU and R@k, tool use, errors.

The lmms-eval model records each sample's trace here (`record_trace`) keyed by a fingerprint of the
benchmark document; the task's `process_results` (same process, after generation) looks the trace up
(`trace_for`) to report `avg_tool_calls`, `tool_usage_rate` and `errored` beside accuracy. A
document that no ParaVT run recorded (another model evaluated on our tasks) made no tool calls.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

from paravt.eval.traces import SampleTrace
from paravt.rewards import exact_match, mcq_accuracy, temporal_iou, token_f1

RECALL_THRESHOLDS = (0.3, 0.5, 0.7)

_TRACES: dict[str, SampleTrace] = {}


def doc_fingerprint(doc: Mapping[str, Any]) -> str:
    """A stable key for a benchmark document (its JSON with sorted keys, media left out)."""
    plain = {k: v for k, v in doc.items() if isinstance(v, (str, int, float, bool, list, dict))}
    blob = json.dumps(plain, sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.sha1(blob.encode("utf-8")).hexdigest()


def record_trace(doc: Mapping[str, Any], trace: SampleTrace) -> None:
    _TRACES[doc_fingerprint(doc)] = trace


def trace_for(doc: Mapping[str, Any]) -> SampleTrace | None:
    return _TRACES.get(doc_fingerprint(doc))


def tool_scores(doc: Mapping[str, Any]) -> dict[str, float]:
    """`avg_tool_calls` (executed calls), `tool_usage_rate` (0/1) and `errored` (0/1) of one doc."""
    trace = trace_for(doc)
    if trace is None:
        return {"avg_tool_calls": 0.0, "tool_usage_rate": 0.0, "errored": 0.0}
    return {
        "avg_tool_calls": float(trace.num_tool_calls),
        "tool_usage_rate": float(trace.used_tool),
        "errored": float(trace.error is not None),
    }


def mcq_score(prediction: str, answer: str, options: list[str] | None = None) -> float:
    """1.0 when the prediction names the right option (letter, or option text), else 0.0."""
    return mcq_accuracy(prediction, answer, options)


def open_ended_score(prediction: str, answer: str) -> float:
    """Exact match after normalisation counts 1; otherwise token F1 (the reference default)."""
    return exact_match(prediction, answer) or token_f1(prediction, answer)


def grounding_scores(prediction: str, answer: str) -> dict[str, float]:
    """`miou` (the IoU of this sample) and `r@0.3`, `r@0.5`, `r@0.7` (IoU at least k)."""
    iou = temporal_iou(prediction, answer)
    scores = {"miou": iou}
    for k in RECALL_THRESHOLDS:
        scores[f"r@{k}"] = 1.0 if iou >= k else 0.0
    return scores


def mean(values: Iterable[float]) -> float:
    vals = [float(v) for v in values]
    return sum(vals) / len(vals) if vals else math.nan


def count(values: Iterable[float]) -> int:
    """How many samples had the flag set (for `errored`)."""
    return int(sum(float(v) for v in values))
