"""Per-sample traces: what the agent thought, which windows it cropped, what came back, the answer.

One JSON object per sample (`SampleTrace.to_json()`); `TraceWriter` appends them to a JSONL file and
keeps per-task tallies (samples, tool calls, samples that used a tool, errored samples and why, the
protocol of the run) that it writes to a `*.summary.json` beside the traces. An errored sample is
handed to its scorer as an empty answer: it counts, as wrong.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from paravt.core import Episode


@dataclass
class SampleTrace:
    """One evaluated sample. `error` is set when the sample could not be run at all."""

    task: str
    doc_id: int | str
    video: str | None
    question: str
    response: str  # what is handed to the benchmark's scorer (the answer, or the last response)
    answer: str | None = None
    overview_frames: int = 0
    duration_s: float | None = None
    turns: list[dict[str, Any]] = field(default_factory=list)
    num_tool_calls: int = 0  # executed valid calls, all turns
    num_call_attempts: int = 0
    num_tool_errors: int = 0
    forced_answer: bool = False
    truncated: bool = False  # a token limit cut the episode (its answer may be missing)
    prepare_s: float = 0.0  # probing and decoding the overview
    total_s: float = 0.0  # the agent episode
    error: str | None = None
    # The full episode (token ids, sub-agent trajectories) for in-process callers; not serialized.
    episode: Episode | None = field(default=None, repr=False, compare=False)

    @property
    def used_tool(self) -> bool:
        return self.num_tool_calls > 0

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "episode"}


def turns_of(episode: Episode) -> list[dict[str, Any]]:
    """The turns of an episode as plain data: think, calls with windows, summaries, timings."""
    return [t.to_dict() for t in episode.turns]


def response_of(episode: Episode) -> str:
    """What a benchmark scores: the final answer, or the last response when there is no answer."""
    if episode.answer is not None:
        return episode.answer
    return episode.turns[-1].response if episode.turns else ""


def trace_from_episode(
    trace: SampleTrace,
    episode: Episode,
    *,
    overview_frames: int,
    duration_s: float | None,
    prepare_s: float = 0.0,
) -> SampleTrace:
    """`trace`, which names its sample, completed with what the sample's `episode` did."""
    return replace(
        trace,
        response=response_of(episode),
        answer=episode.answer,
        overview_frames=overview_frames,
        duration_s=duration_s,
        turns=turns_of(episode),
        num_tool_calls=episode.num_tool_calls,
        num_call_attempts=episode.num_call_attempts,
        num_tool_errors=episode.num_tool_errors,
        forced_answer=episode.forced_answer,
        truncated=episode.truncated,
        prepare_s=round(prepare_s, 4),
        total_s=round(episode.total_s, 4),
        episode=episode,
    )


def error_reason(error: str) -> str:
    """What went wrong, without the sample's particulars: the stage and the exception type
    (`could not prepare the sample: FileNotFoundError`)."""
    return ": ".join(error.split(": ")[:2])


@dataclass
class TaskTally:
    samples: int = 0
    tool_calls: int = 0
    used_tool: int = 0
    errored: int = 0
    truncated: int = 0
    # reason -> {"count": n, "example": "doc D: the first such error in full"}
    errors: dict[str, dict[str, Any]] = field(default_factory=dict)

    def add(self, trace: SampleTrace) -> None:
        self.samples += 1
        self.tool_calls += trace.num_tool_calls
        self.used_tool += int(trace.used_tool)
        self.truncated += int(trace.truncated)
        if trace.error is not None:
            self.errored += 1
            entry = self.errors.setdefault(
                error_reason(trace.error),
                {"count": 0, "example": f"doc {trace.doc_id}: {trace.error}"},
            )
            entry["count"] += 1

    def to_json(self) -> dict[str, Any]:
        n = self.samples
        return {
            "samples": n,
            "avg_tool_calls": self.tool_calls / n if n else 0.0,
            "tool_usage_rate": self.used_tool / n if n else 0.0,
            "errored": self.errored,
            "truncated": self.truncated,
            "errors": self.errors,
        }

    def error_lines(self, task: str) -> list[str]:
        """One line per reason: how many samples errored (scored wrong) and why."""
        return [
            f"{task}: {e['count']} of {self.samples} samples errored (scored wrong): {reason} "
            f"(e.g. {e['example'][:300]})"
            for reason, e in self.errors.items()
        ]


class TraceWriter:
    """Appends traces to `path` (JSONL) and keeps `path.with_suffix('.summary.json')` current
    (per task: the tallies, and `protocol`, the run's protocol line, when given)."""

    def __init__(self, path: str | Path, protocol: str | None = None) -> None:
        self.path = Path(path)
        self.protocol = protocol
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.summary_path = self.path.with_name(self.path.stem + ".summary.json")
        self.tallies: dict[str, TaskTally] = {}
        self._lock = threading.Lock()

    def write(self, traces: list[SampleTrace]) -> None:
        with self._lock:
            with self.path.open("a", encoding="utf-8") as f:
                for trace in traces:
                    f.write(json.dumps(trace.to_json(), ensure_ascii=False, default=str) + "\n")
                    self.tallies.setdefault(trace.task, TaskTally()).add(trace)
            summary = {task: self._summary(t) for task, t in sorted(self.tallies.items())}
            self.summary_path.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")

    def _summary(self, tally: TaskTally) -> dict[str, Any]:
        out = tally.to_json()
        if self.protocol is not None:
            out["protocol"] = self.protocol
        return out

    def error_lines(self) -> list[str]:
        """Every task's errored samples by reason (see `TaskTally.error_lines`)."""
        with self._lock:
            return [
                line for task, t in sorted(self.tallies.items()) for line in t.error_lines(task)
            ]


def read_traces(path: str | Path) -> list[dict[str, Any]]:
    """Every trace of a JSONL file, in order."""
    out = []
    with Path(path).open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                out.append(json.loads(line))
    return out
