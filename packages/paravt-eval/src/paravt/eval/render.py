"""Show one agent episode to a person (rich): overview, turns with their parallel calls, answer."""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from paravt.eval.traces import SampleTrace

MAX_THINK_CHARS = 600


def _window(values: Any) -> str:
    if not values:
        return "-"
    start, end = values
    return f"{float(start):.1f}-{float(end):.1f} s"


def _requested(arguments: dict[str, Any]) -> str:
    start, end = arguments.get("start_time"), arguments.get("end_time")
    if start is None and end is None:
        return "-"
    return f"{start}-{end}"


def _clip(text: str | None, limit: int) -> str:
    if not text:
        return ""
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def render_trace(trace: SampleTrace, *, model: str, console: Console | None = None) -> None:
    """Print the episode of `trace`: overview budget, per-turn calls and summaries, answer, timings."""
    console = console or Console()
    head = Table.grid(padding=(0, 2))
    head.add_row("model", model)
    head.add_row("video", str(trace.video))
    if trace.duration_s is not None:
        head.add_row("duration", f"{trace.duration_s:.1f} s")
    head.add_row("overview", f"{trace.overview_frames} frames")
    head.add_row("question", trace.question)
    console.print(Panel(head, title="paravt ask", expand=False))
    if trace.error:
        console.print(Panel(Text(trace.error, style="red"), title="error", expand=False))
        return
    for turn in trace.turns:
        parts: list[Any] = []
        if turn["think"]:
            parts.append(
                Text("think: ", style="bold") + Text(_clip(turn["think"], MAX_THINK_CHARS))
            )
        calls = turn["calls"]
        if calls:
            table = Table(show_lines=False, expand=False)
            for col in ("#", "requested", "read", "frames", "status", "sub-agent summary"):
                table.add_column(col)
            for c in calls:
                status = "ok" if c["executed"] and not c["error"] else _clip(c["error"], 60)
                table.add_row(
                    str(c["index"]),
                    _requested(c["arguments"]),
                    _window(c["window_s"]),
                    str(c["num_frames"]),
                    status,
                    _clip(c["summary"], 120) or ("" if c["summary"] is None else "(empty)"),
                )
            executed = sum(1 for c in calls if c["executed"])
            parts.append(Text(f"{len(calls)} call(s), {executed} run in parallel", style="bold"))
            parts.append(table)
        if turn["answer"] is not None:
            parts.append(Text("answer: ", style="bold green") + Text(turn["answer"]))
        if turn["issues"]:
            parts.append(
                Text(
                    "format issues: " + "; ".join(i["message"] for i in turn["issues"][:4]),
                    style="yellow",
                )
            )
        timing = f"generate {turn['timings_s']['generate']:.2f} s"
        if calls:
            timing += f", tools {turn['timings_s']['tools']:.2f} s, sub-agents {turn['timings_s']['subagents']:.2f} s"
        parts.append(
            Text(f"{turn['num_tokens']} tokens ({turn['finish_reason']}); {timing}", style="dim")
        )
        console.print(Panel(Group(*parts), title=f"turn {turn['turn']}", expand=False))
    answer = trace.answer if trace.answer is not None else "(no <answer> block)"
    summary = Table.grid(padding=(0, 2))
    summary.add_row("answer", Text(answer, style="bold green" if trace.answer else "yellow"))
    summary.add_row(
        "tool calls", f"{trace.num_tool_calls} run, {trace.num_call_attempts} attempted"
    )
    summary.add_row("time", f"prepare {trace.prepare_s:.2f} s, agent {trace.total_s:.2f} s")
    console.print(Panel(summary, title="result", expand=False))
