"""Issue 44: f_tau (each run's own format reward) can read high while every tool call is invalid,
so wherever `reproduce` prints or plots it, format ok and invalid calls per episode stand beside
it: the Table 2 blocks, tables.json, the claims' evidence, the curves cells and the chart."""

from __future__ import annotations

import json
from pathlib import Path

from paravt.eval.reproduce.cells import CURVE_KEYS, settled, training_curves
from paravt.eval.reproduce.chart import draw_chart
from paravt.eval.reproduce.claims import verdicts
from paravt.eval.reproduce.tables import Row, Summary, render_tables


def _row(name: str, f_tau: float, fmt_ok: float, invalid: float, kappa: float) -> Row:
    return Row(
        name,
        f_tau=[f_tau, f_tau],
        kappa=[kappa, kappa],
        accuracy={8: [0.5, 0.6]},
        format_ok=[fmt_ok, fmt_ok],
        leak_rate=[0.0, 0.0],
        invalid_calls=[invalid, invalid],
        eval_kappa={8: [1.0, 1.0]},
    )


def _summary() -> Summary:
    rows = {
        "base": _row("base", 0.05, 0.0, 0.0, 0.0),
        "sft": _row("sft", 1.0, 1.0, 0.1, 0.6),
        # the run: f_tau 0.97 while nearly every call is invalid
        "grpo": _row("grpo", 0.97, 0.05, 2.5, 0.0),
        "anchoring_only": _row("anchoring_only", 0.99, 0.9, 0.2, 0.1),
    }
    return Summary([0, 1], [8], rows, None, setup={})


def test_table_prints_invalid_calls_and_format_ok_right_beside_f_tau() -> None:
    md = "\n".join(render_tables(_summary()))
    assert "| Setting | f_tau | invalid calls / ep | format ok | leak | kappa | acc K=8 |" in md
    assert (
        "| + SFT + GRPO | 0.97 ± 0.00 | 2.50 ± 0.00 | 0.05 ± 0.00 | 0.00 ± 0.00 | 0.00 ± 0.00 |"
        in md
    )
    # every line has as many cells as the header
    table = [line for line in md.splitlines() if line.startswith("| ")][:4]
    assert len({line.count("|") for line in table}) == 1


def test_rows_without_invalid_calls_show_a_dash_and_json_records_them() -> None:
    s = _summary()
    s.rows["base"].invalid_calls = [None, None]  # a cell measured before issue 44
    md = "\n".join(render_tables(s))
    assert "| Tiny Qwen3-VL (untrained) | 0.05 ± 0.00 | - | 0.00 ± 0.00 |" in md
    assert s.to_json()["rows"]["grpo"]["invalid_calls"] == [2.5, 2.5]


def test_claims_quoting_f_tau_give_format_ok_and_invalid_calls_beside_it() -> None:
    by_claim = {v.claim: v.evidence for v in verdicts(_summary())}
    sft = by_claim["SFT cold start transfers the tool-call format"]
    assert "format ok 0.00 ± 0.00 -> 1.00 ± 0.00, invalid calls / ep 0.00 ± 0.00 -> 0.10" in sft
    anchoring = by_claim["Exploration Anchoring keeps the format under temperature"]
    assert "format ok 0.05 ± 0.00 -> 0.90 ± 0.00" in anchoring
    assert "invalid calls / ep 2.50 ± 0.00 -> 0.20 ± 0.00" in anchoring


def test_curves_record_invalid_calls_per_episode_and_the_chart_draws_them(
    tmp_path: Path,
) -> None:
    assert {"format_ok", "tool/invalid_calls", "tool/call_attempts"} <= set(CURVE_KEYS)
    run = tmp_path / "grpo"
    run.mkdir()
    rows = [
        {"step": s, "kappa": 0.0, "f_tau": 0.97, "format_ok": 0.05, "tool/invalid_calls": s / 2}
        for s in range(1, 7)
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    curves = training_curves(run)
    assert curves["tool/invalid_calls"] == [0.5, 1.0, 1.5, 2.0, 2.5, 3.0]
    assert settled(curves["tool/invalid_calls"]) == 2.0  # the last 5 steps
    s = _summary()
    s.rows["grpo"].curves = [curves, curves]
    png = draw_chart(s, tmp_path / "curves.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
