"""`reproduce` renders the paper's table layouts from cells and never re-runs a finished cell."""

from __future__ import annotations

import json

import pytest

from paravt.eval import reproduce
from paravt.eval.reproduce import (
    SYNTH_COLUMNS,
    ReproduceConfig,
    build_tables,
    parse_checkpoints,
    render_markdown,
    run_lmms_cells,
)


def _cell(out, model, task, value, errored=0, calls=1.5, rate=0.75):
    path = out / "cells" / f"{model}__{task}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "model": model,
                "task": task,
                "value": value,
                "errored": errored,
                "metrics": {"avg_tool_calls": calls, "tool_usage_rate": rate},
            }
        )
    )


def test_tables_have_one_column_per_task_plus_the_average_and_show_errored_counts(tmp_path):
    for model in ("base", "para_grpo", "para_grpo_sequential"):
        for c, v in zip(SYNTH_COLUMNS, (0.5, 0.25, 0.75)):
            _cell(tmp_path, model, c.task, v, errored=2 if model == "base" else 0)
    for stage, f, k in (("base", 0.03, 0.45), ("para_grpo", 0.41, 0.21)):
        (tmp_path / "cells" / f"{stage}__train_stats.json").write_text(
            json.dumps({"f_tau": f, "kappa": k})
        )
    missing = {"sft": "no checkpoint given", "grpo": "no checkpoint given"}
    tables = build_tables(
        tmp_path,
        ["base", "sft", "grpo", "para_grpo", "para_grpo_sequential"],
        SYNTH_COLUMNS,
        missing,
    )
    base = tables["table1"][0]
    assert base["values"] == [50.0, 25.0, 75.0] and base["avg"] == pytest.approx(50.0)
    assert (
        tables["table1"][1]["values"] == [None, None, None] and tables["table1"][1]["avg"] is None
    )
    assert [r["model"] for r in tables["table2"]] == ["base", "sft", "grpo", "para_grpo"]
    assert tables["table2"][3]["f_tau"] == 0.41
    md = render_markdown(tables, paper=False)
    assert "| Model | Synth MCQ (acc) | Synth TVG (mIoU) | Synth OE (acc) | Avg |" in md
    assert "50.0 (2 errored)" in md
    assert "| +SFT+PARA-GRPO | 0.41 | 0.21 |" in md
    assert "| sequential | 50.0 | 25.0 | 75.0 | 50.0 |" in md
    assert "- +SFT: no checkpoint given" in md


def test_finished_cells_are_skipped_on_a_rerun(tmp_path, monkeypatch):
    for c in SYNTH_COLUMNS:
        _cell(tmp_path, "base", c.task, 0.5)
    monkeypatch.setattr(reproduce, "_run", lambda *a, **k: pytest.fail("lmms-eval was re-run"))
    run_lmms_cells(ReproduceConfig(out=tmp_path), "base", tmp_path, SYNTH_COLUMNS, tmp_path)


def test_checkpoints_are_parsed_per_stage_with_errors_naming_the_fix(tmp_path):
    assert parse_checkpoints(f"base={tmp_path}, sft={tmp_path}") == {
        "base": tmp_path,
        "sft": tmp_path,
    }
    with pytest.raises(ValueError, match="stage one of base, sft, grpo, para_grpo"):
        parse_checkpoints(f"rl={tmp_path}")
    with pytest.raises(ValueError, match="not a checkpoint directory"):
        parse_checkpoints(f"base={tmp_path / 'x'}")


@pytest.mark.slow
def test_reproduce_fills_the_base_row_offline_and_names_the_rows_it_could_not_fill(
    tiny_model, synth_dir, tmp_path, monkeypatch
):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    config = ReproduceConfig(
        out=tmp_path / "rep",
        checkpoints=f"base={tiny_model}",
        synth_dir=synth_dir,
        limit=1,
        train=False,
        main_nframes=2,
        max_new_tokens=8,
        ftau_rollouts=2,
    )
    result = reproduce.run_reproduce(config)
    assert result.chart_path.stat().st_size > 0
    tables = json.loads(result.json_path.read_text())
    base = tables["table1"][0]
    assert base["model"] == "base" and all(v is not None for v in base["values"])
    assert base["avg"] == pytest.approx(sum(base["values"]) / 3)
    assert tables["table2"][0]["f_tau"] is not None and tables["table2"][0]["kappa"] is not None
    assert set(tables["missing"]) == {"sft", "grpo", "para_grpo"}
    md = result.markdown_path.read_text()
    assert "+SFT+PARA-GRPO: no checkpoint given" in md
    # a re-run skips every finished cell: lmms-eval is not started again
    monkeypatch.setattr(reproduce, "_run", lambda *a, **k: pytest.fail("a finished cell re-ran"))
    again = reproduce.run_reproduce(config)
    assert json.loads(again.json_path.read_text())["table1"][0]["values"] == base["values"]
