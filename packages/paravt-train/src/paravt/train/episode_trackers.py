"""The step's recorded episodes (`paravt.train.episodes` records) for the experiment trackers: one
W&B table row per episode and a TensorBoard markdown text. `MetricsLogger.log_episodes` sends
them when `logging.wandb` / `logging.tensorboard` is on and episodes are recorded.

Texts are cut to a few thousand characters (`… (+N chars)`); the markdown escapes what the
model wrote (its `<tool_call>` tags would otherwise vanish as HTML), the turns go in indented code
blocks. The full records stay in `<output_dir>/episodes/episodes.jsonl`."""

from __future__ import annotations

import html
import math
import re
from collections.abc import Sequence
from typing import Any

EPISODE_COLUMNS = [
    "step",
    "weight_version",
    "k",
    "key",
    "question",
    "ground_truth",
    "answer",
    "correct",
    "reward",
    "reward_format",
    "reward_base_format",
    "reward_anchor",
    "reward_tool",
    "reward_penalty",
    "format_ok",
    "call_attempts",
    "invalid_calls",
    "tool_responses",
    "invalid_reasons",
    "advantage",
    "turns",
]
QUESTION_CHARS = 1000  # a question (with its options) in a row / block
ANSWER_CHARS = 300  # the ground truth, the answer
TURN_CHARS = 3000  # one main turn's text
_MD_SPECIAL = re.compile(r"([\\`*_\[\]|])")


def cut(text: Any, limit: int) -> str:
    """`text` as a string of at most about `limit` characters (a longer one ends `… (+N chars)`)."""
    s = "" if text is None else str(text)
    if len(s) <= limit:
        return s
    return f"{s[:limit]}… (+{len(s) - limit} chars)"


def _num(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x) if math.isfinite(x) else None


def _int(x: Any) -> int | None:
    return int(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def invalid_reasons(rec: dict[str, Any]) -> list[str]:
    """`turn T call C: reason` of each invalid call of the episode, in order."""
    out = []
    for t in rec.get("turns") or []:
        for c in t.get("calls") or []:
            if c.get("status") == "invalid":
                out.append(f"turn {t.get('turn')} call {c.get('index')}: {c.get('reason')}")
    return out


def turns_text(rec: dict[str, Any], limit: int = TURN_CHARS) -> str:
    """The main turns' texts, each under a `[turn T, finish F]` line, each cut to `limit`."""
    parts = []
    for t in rec.get("turns") or []:
        head = f"[turn {t.get('turn')}, finish {t.get('finish_reason')}]"
        parts.append(f"{head}\n{cut(t.get('text'), limit)}")
    return "\n\n".join(parts)


def episode_row(rec: dict[str, Any]) -> list[Any]:
    """One record as a row of `EPISODE_COLUMNS` (numbers as float/int or None, texts as str)."""
    reward = rec.get("reward") or {}
    reasons = invalid_reasons(rec)
    return [
        _int(rec.get("step")),
        _int(rec.get("weight_version")),
        _int(rec.get("k")),
        str(rec.get("key")),
        cut(_question(rec), QUESTION_CHARS),
        cut(rec.get("ground_truth"), ANSWER_CHARS),
        cut(rec.get("answer"), ANSWER_CHARS),
        _num(reward.get("accuracy")),
        _num(reward.get("total")),
        _num(reward.get("format")),
        _num(reward.get("base_format")),
        _num(reward.get("anchor")),
        _num(reward.get("tool")),
        _num(reward.get("penalty")),
        bool(rec.get("format_ok")),
        _int(reward.get("call_attempts")),
        _int(reward.get("invalid_calls")),
        _int(reward.get("tool_responses")),
        "; ".join(reasons),
        _num(rec.get("advantage")),
        turns_text(rec),
    ]


def wandb_table(records: Sequence[dict[str, Any]]) -> Any:
    """A `wandb.Table` of `EPISODE_COLUMNS`, one row per record."""
    import wandb

    return wandb.Table(columns=list(EPISODE_COLUMNS), data=[episode_row(r) for r in records])


def _question(rec: dict[str, Any]) -> str:
    q = "" if rec.get("question") is None else str(rec["question"])
    options = rec.get("options")
    if options:
        q += " Options: " + " ".join(str(o) for o in options)
    return q


def md_inline(text: Any, limit: int) -> str:
    """`text` for one markdown line: whitespace collapsed, cut, HTML and markdown escaped."""
    s = cut(" ".join(("" if text is None else str(text)).split()), limit)
    return _MD_SPECIAL.sub(r"\\\1", html.escape(s, quote=False))


def _fmt(x: Any) -> str:
    v = _num(x)
    return "–" if v is None else f"{v:.3g}"


def episodes_markdown(step: int, records: Sequence[dict[str, Any]]) -> str:
    """The step's episodes as TensorBoard markdown: a summary table, then one block per episode
    (question, answers, reward parts, calls, invalid-call reasons, the turns as code)."""
    lines = [
        f"**Step {step}: {len(records)} recorded episodes** (full records: episodes/episodes.jsonl)",
        "",
        "| key | K | correct | reward | format_ok | calls | invalid |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in records:
        rw = r.get("reward") or {}
        cells = [
            md_inline(r.get("key"), 80),
            str(r.get("k")),
            _fmt(rw.get("accuracy")),
            _fmt(rw.get("total")),
            "yes" if r.get("format_ok") else "no",
            str(rw.get("call_attempts")),
            str(rw.get("invalid_calls")),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    for r in records:
        rw = r.get("reward") or {}
        parts = ", ".join(
            f"{p} {_fmt(rw.get(p))}" for p in ("accuracy", "format", "anchor", "tool", "penalty")
        )
        reasons = invalid_reasons(r)
        lines += [
            "",
            "---",
            "",
            f"#### {md_inline(r.get('key'), 120)} (K={r.get('k')}, "
            f"weights v{r.get('weight_version')})",
            "",
            f"**Question:** {md_inline(_question(r), QUESTION_CHARS)}  ",
            f"**Ground truth:** {md_inline(r.get('ground_truth'), ANSWER_CHARS)} · "
            f"**answer:** {md_inline(r.get('answer'), ANSWER_CHARS)}  ",
            f"**Reward** {_fmt(rw.get('total'))} ({parts}) · format_ok "
            f"{'yes' if r.get('format_ok') else 'no'} · advantage {_fmt(r.get('advantage'))}  ",
            f"**Calls:** {rw.get('call_attempts')} attempted, {rw.get('invalid_calls')} invalid, "
            f"{rw.get('tool_responses')} tool responses"
            + (f" · invalid: {md_inline('; '.join(reasons), 600)}" if reasons else ""),
        ]
        for t in r.get("turns") or []:
            lines += [
                "",
                f"*Turn {t.get('turn')}* (finish {md_inline(t.get('finish_reason'), 40)}):",
                "",
                _code_block(cut(t.get("text"), TURN_CHARS)),
            ]
    return "\n".join(lines) + "\n"


def _code_block(text: str) -> str:
    """`text` as an indented markdown code block (shown verbatim, tags included)."""
    body = text.expandtabs(4).splitlines() or [""]
    return "\n".join("    " + line for line in body)
