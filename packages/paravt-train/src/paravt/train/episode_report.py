"""What the recorded episodes of a run say (`paravt-train episodes RUN_DIR`): a per-step table in
the terminal (rich; `--json` for machines) and a static HTML viewer (Jinja2; opens from the file
system, no server).

Per step, over the step's recorded episodes (`paravt.core.episode_records`: an RL run's, or
`paravt-eval ask --trace`'s at step 0): call attempts, invalid calls (with the parser's reasons), tool responses, crops per turn, answer rate, accuracy, f_tau
(the format reward), format ok, the leaked tool prior, the reward, and kappa per overview budget
K. The invalid share of call attempts is compared between the first and the last half of the
steps, the run's hole at a glance: a rising share while the reward rises is a reward earned by
invalid calls.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from importlib.resources import files
from pathlib import Path
from typing import Any

from paravt.core.episode_files import episodes_dir, read_episodes

PAGE_SIZE = 50
TOP_REASONS = 8
SPARK_W, SPARK_H = 180, 40


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else math.nan


def _num(x: Any) -> float:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else math.nan


def _calls(ep: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for t in ep.get("turns", []) for c in t.get("calls", [])]


def reason_text(call: dict[str, Any]) -> str:
    """A call's invalid reason with its message, numbers kept (the 8.0 = 8.0 window is the
    point), cut to one short line."""
    message = str(call.get("error") or "").strip().replace("\n", " ")
    message = re.sub(r"\s+", " ", message)
    return f"{call.get('reason')}: {message[:120]}" if message else str(call.get("reason"))


def step_summary(step: int, eps: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The summary row of one step's recorded episodes."""
    rewards = [e.get("reward") or {} for e in eps]
    attempts = sum(_num(r.get("call_attempts")) for r in rewards)
    invalid = sum(_num(r.get("invalid_calls")) for r in rewards)
    turns = [t for e in eps for t in e.get("turns", [])]
    reasons = Counter(c.get("reason") for e in eps for c in _calls(e) if c["status"] == "invalid")
    kappa: dict[str, float] = {}
    for k in sorted({int(e["k"]) for e in eps if e.get("k") is not None}):
        at_k = [e for e in eps if e.get("k") == k]
        kappa[str(k)] = _mean([sum(c["status"] == "ok" for c in _calls(e)) for e in at_k])
    return {
        "step": step,
        "episodes": len(eps),
        "call_attempts": attempts / len(eps) if eps else math.nan,
        "invalid_calls": invalid / len(eps) if eps else math.nan,
        "invalid_share": invalid / attempts if attempts > 0 else 0.0,
        "invalid_by_reason": dict(reasons.most_common()),
        # from the calls themselves: an unscored (evaluation) episode has no reward to read
        "tool_responses": _mean([float(sum(c["status"] == "ok" for c in _calls(e))) for e in eps]),
        "crops_per_turn": _mean(
            [float(sum(c["status"] == "ok" for c in t.get("calls", []))) for t in turns]
        ),
        "answer_rate": _mean([float(e.get("answer") is not None) for e in eps]),
        "accuracy": _mean([_num(r.get("accuracy")) for r in rewards]),
        "f_tau": _mean([_num(r.get("format")) for r in rewards]),
        "format_ok": _mean([float(bool(e.get("format_ok"))) for e in eps]),
        "leak_rate": _mean([float(bool(e.get("leak", {}).get("prior_leak"))) for e in eps]),
        "reward": _mean([_num(r.get("total")) for r in rewards]),
        "kappa_per_k": kappa,
    }


def summarize(episodes: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Per-step rows, the run's top invalid-call reasons and the invalid share's trend."""
    by_step: dict[int, list[dict[str, Any]]] = {}
    eps = list(episodes)
    for e in eps:
        by_step.setdefault(int(e.get("step", 0)), []).append(e)
    steps = [step_summary(s, by_step[s]) for s in sorted(by_step)]
    top = Counter(
        reason_text(c) for e in eps for c in _calls(e) if c.get("status") == "invalid"
    ).most_common(TOP_REASONS)
    # what the reward paid episodes whose every call attempt was invalid (no tool response):
    # the released tool credit pays them R_tool, the evidence credit nothing
    all_invalid = [
        e for e in eps if _calls(e) and all(c.get("status") == "invalid" for c in _calls(e))
    ]
    return {
        "episodes": len(eps),
        "steps": steps,
        "top_invalid_reasons": [{"reason": r, "count": n} for r, n in top],
        "trend": {
            **trend(steps),
            "all_invalid_episodes": len(all_invalid),
            "all_invalid_tool_reward": _mean(
                [_num((e.get("reward") or {}).get("tool")) for e in all_invalid]
            ),
        },
    }


def trend(steps: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The invalid share of call attempts, the reward and format ok, first half of the steps
    against the last half; `warning` when the share rose by >= 0.1."""
    if len(steps) < 2:
        return {"warning": False}
    half = len(steps) // 2
    first, last = steps[:half], steps[-half:]

    def share(rows: Sequence[dict[str, Any]]) -> float:
        att = sum(r["call_attempts"] * r["episodes"] for r in rows)
        inv = sum(r["invalid_calls"] * r["episodes"] for r in rows)
        return inv / att if att > 0 else 0.0

    out = {
        "invalid_share_first": share(first),
        "invalid_share_last": share(last),
        "reward_first": _mean([r["reward"] for r in first]),
        "reward_last": _mean([r["reward"] for r in last]),
        "format_ok_first": _mean([r["format_ok"] for r in first]),
        "format_ok_last": _mean([r["format_ok"] for r in last]),
    }
    out["warning"] = out["invalid_share_last"] - out["invalid_share_first"] >= 0.1
    return out


def trend_text(t: dict[str, Any]) -> str:
    if "invalid_share_first" not in t:
        return "fewer than two steps recorded: no trend"
    text = (
        f"invalid share of call attempts {t['invalid_share_first']:.2f} -> "
        f"{t['invalid_share_last']:.2f}, reward {t['reward_first']:.2f} -> "
        f"{t['reward_last']:.2f}, format ok {t['format_ok_first']:.2f} -> "
        f"{t['format_ok_last']:.2f} (first half of the steps -> last half)"
    )
    if t["warning"]:
        paid_tool = t.get("all_invalid_tool_reward", math.nan)
        if t["reward_last"] <= t["reward_first"]:
            paid = "(the reward did not rise with it)"
        elif isinstance(paid_tool, float) and paid_tool > 0:
            paid = (
                "while the reward rose: episodes whose every call was invalid still earned the "
                f"tool reward ({paid_tool:.2f} on average): it is being paid for invalid calls"
            )
        else:
            paid = (
                "while the reward rose (episodes whose every call was invalid earned no tool "
                "reward here: the rise came from elsewhere; look at those episodes)"
            )
        text = f"INVALID CALLS RISING {paid}. " + text
    return text


def _clean(x: Any) -> Any:
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_clean(v) for v in x]
    return x


def summary_json(summary: dict[str, Any]) -> str:
    return json.dumps(_clean(summary), indent=2)


def print_summary(summary: dict[str, Any], *, title: str = "episodes") -> None:
    """The per-step table and the top invalid-call reasons, as rich tables on stdout."""
    import sys

    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    # piped (CI logs, files): wide enough for every column rather than rich's 80
    console = Console(width=None if sys.stdout.isatty() else 180)

    def f(x: Any, fmt: str = ".2f") -> str:
        return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:{fmt}}"

    table = Table(title=f"{title}: {summary['episodes']} recorded episodes", title_justify="left")
    for name in (
        "step",
        "eps",
        "calls/ep",
        "invalid/ep",
        "invalid %",
        "invalid by parser error",
        "resp/ep",
        "crops/turn",
        "answered",
        "accuracy",
        "f_tau",
        "format ok",
        "leak",
        "reward",
    ):
        left = name.startswith("invalid by")
        table.add_column(name, justify="left" if left else "right", no_wrap=not left)
    for r in summary["steps"]:
        reasons = ", ".join(f"{k} {n}" for k, n in r["invalid_by_reason"].items())
        share = r["invalid_share"]
        table.add_row(
            str(r["step"]),
            str(r["episodes"]),
            f(r["call_attempts"]),
            f(r["invalid_calls"]),
            f"[bold red]{share:.0%}[/]" if share >= 0.25 else f"{share:.0%}",
            Text(reasons or "-"),
            f(r["tool_responses"]),
            f(r["crops_per_turn"]),
            f(r["answer_rate"]),
            f(r["accuracy"]),
            f(r["f_tau"]),
            f(r["format_ok"]),
            f(r["leak_rate"]),
            f(r["reward"]),
        )
    console.print(table)
    if summary["top_invalid_reasons"]:
        top = Table(title="top invalid-call reasons (the parser's)", title_justify="left")
        top.add_column("count", justify="right")
        top.add_column("reason")
        for row in summary["top_invalid_reasons"]:
            top.add_row(str(row["count"]), Text(row["reason"]))
        console.print(top)
    t = summary["trend"]
    style = "bold red" if t.get("warning") else "dim"
    console.print(trend_text(t), style=style, markup=False)


# --------------------------------------------------------------------------------------------------
# The viewer


def sparkline(values: Sequence[float], *, lo: float | None = None, hi: float | None = None) -> str:
    """The `points` of an SVG polyline of `values` over a SPARK_W x SPARK_H box (NaNs skipped)."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return ""
    lo = min(finite) if lo is None else lo
    hi = max(finite) if hi is None else hi
    span = (hi - lo) or 1.0
    n = max(len(values) - 1, 1)
    pts = []
    for i, v in enumerate(values):
        if math.isfinite(v):
            x = 2 + (SPARK_W - 4) * i / n
            y = SPARK_H - 3 - (SPARK_H - 6) * (v - lo) / span
            pts.append(f"{x:.1f},{y:.1f}")
    return " ".join(pts)


def sparklines(steps: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One sparkline per measure: reward, accuracy, kappa per K (a line each), format ok, the
    invalid share of call attempts and invalid calls per episode."""
    out = []
    plain = [
        ("reward", "reward", None, None),
        ("accuracy", "accuracy", 0.0, 1.0),
        ("format ok", "format_ok", 0.0, 1.0),
        ("invalid share of calls", "invalid_share", 0.0, 1.0),
        ("invalid calls / episode", "invalid_calls", 0.0, None),
    ]
    for label, key, lo, hi in plain:
        vals = [float(r[key]) if r[key] is not None else math.nan for r in steps]
        finite = [v for v in vals if math.isfinite(v)]
        out.append(
            {
                "label": label,
                "lines": [{"points": sparkline(vals, lo=lo, hi=hi), "name": label}],
                "last": finite[-1] if finite else None,
                "first": finite[0] if finite else None,
            }
        )
    ks = sorted({k for r in steps for k in r["kappa_per_k"]}, key=lambda k: int(k))
    every = [v for r in steps for v in r["kappa_per_k"].values() if math.isfinite(v)]
    hi = max(every) if every else 1.0
    lines = []
    for k in ks:
        vals = [r["kappa_per_k"].get(k, math.nan) for r in steps]
        lines.append({"points": sparkline(vals, lo=0.0, hi=hi or 1.0), "name": f"K={k}"})
    out.append({"label": "kappa per K", "lines": lines, "last": None, "first": None})
    return out


def write_html(run: Path, out: Path | None = None, *, page_size: int = PAGE_SIZE) -> Path:
    """The viewer of `run`'s recorded episodes, one self-contained HTML file (default:
    RUN/episodes/index.html); images are referenced relative to it."""
    from jinja2 import Environment

    root = episodes_dir(run)
    eps = list(read_episodes(run))
    summary = summarize(eps)
    out = Path(out) if out is not None else root / "index.html"
    out.parent.mkdir(parents=True, exist_ok=True)
    prefix = _relative(root, out.parent)
    template = (files("paravt.train") / "templates" / "episodes.html.j2").read_text()
    env = Environment(autoescape=True, trim_blocks=True, lstrip_blocks=True)
    html = env.from_string(template).render(
        title=f"ParaVT episodes: {Path(run).resolve().name}",
        summary=_clean(summary),
        trend=trend_text(summary["trend"]),
        warning=summary["trend"].get("warning", False),
        sparks=sparklines(summary["steps"]),
        spark_w=SPARK_W,
        spark_h=SPARK_H,
        data={"episodes": _clean(eps), "image_prefix": prefix, "page_size": page_size},
    )
    tmp = out.with_name(f".tmp-{out.name}")
    tmp.write_text(html)
    tmp.replace(out)
    return out


def _relative(target: Path, start: Path) -> str:
    """`target` relative to `start` as a URL prefix ('' or 'a/b/'), '..' where needed."""
    import os

    rel = os.path.relpath(Path(target).resolve(), Path(start).resolve())
    return "" if rel == "." else rel.replace(os.sep, "/") + "/"
