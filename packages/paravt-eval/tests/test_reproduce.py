"""`reproduce` renders the paper's table layouts from cells and never re-runs a finished cell."""

from __future__ import annotations

import json

import pytest

from paravt.eval import reproduce
from paravt.eval.reproduce import (
    SYNTH_COLUMNS,
    ReproduceConfig,
    build_tables,
    ensure_synth,
    ensure_train_data,
    eval_protocol,
    parse_checkpoints,
    render_markdown,
    run_lmms_cells,
    tiny_setup,
    train_stage,
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


def test_the_offline_protocol_is_the_tiny_training_recipes_unless_a_flag_overrides_it():
    from paravt.train.recipe import load_recipe
    from paravt.train.smoke import SMOKE_RL, SMOKE_SYNTH, SMOKE_VIDEO

    rl = load_recipe(
        "tiny_paragrpo", ["data.synth.out_dir=.", *SMOKE_SYNTH, *SMOKE_VIDEO, *SMOKE_RL], stage="rl"
    )
    setup = tiny_setup()
    protocol = eval_protocol(ReproduceConfig(), setup)
    assert protocol["main_nframes"] == rl.video.overview_frames
    assert protocol["max_crop_frames"] == rl.video.max_crop_frames
    assert protocol["max_crop_frames"] == setup.synth.crop_max_frames  # traces show what is seen
    assert protocol["max_new_tokens"] == rl.rollout.max_new_tokens
    assert (protocol["max_turns"], protocol["max_parallel"]) == (
        rl.rollout.max_turns,
        rl.rollout.max_parallel,
    )
    assert setup.budgets == tuple(sorted(rl.gating.choices))
    assert eval_protocol(ReproduceConfig(main_nframes=3), setup)["main_nframes"] == 3


def _small_setup():
    """The tiny setup with a 2-video, 20-second training task (fast to generate)."""
    setup = tiny_setup()
    small = setup.synth.model_copy(update={"n": 2, "duration_s": 20.0})
    return reproduce.TinySetup(**{**setup.__dict__, "synth": small})


def test_training_data_has_teacher_traces_at_every_gated_budget_with_crops_the_recipe_shows(
    tmp_path,
):
    import pyarrow.parquet as pq

    setup = _small_setup()
    dirs = ensure_train_data(ReproduceConfig(out=tmp_path), setup)
    assert sorted(dirs) == list(setup.budgets)
    max_crop = setup.protocol["max_crop_frames"]
    for k, d in dirs.items():
        rows = pq.read_table(d / "sft.parquet").to_pylist()
        overviews = [r["frames"]["num_frames"] for r in rows if r["agent"] == "main"]
        crops = [r["frames"]["num_frames"] for r in rows if r["agent"] == "subagent"]
        assert overviews and set(overviews) == {k}
        assert crops and max(crops) <= max_crop
    # the held-out benchmark: other videos (another seed), the same crop frames, all task types
    held = ensure_synth(ReproduceConfig(out=tmp_path, n_videos=2, duration_s=20.0), setup)
    rows = pq.read_table(held / "sft.parquet").to_pylist()
    assert max(r["frames"]["num_frames"] for r in rows if r["agent"] == "subagent") <= max_crop
    rl = pq.read_table(held / "rl.parquet").to_pylist()
    assert {json.loads(r["extra_info"])["question_type"] for r in rl} == {"mcq", "oe", "tvg"}
    train_rl = pq.read_table(dirs[2] / "rl.parquet").to_pylist()
    needles = [json.loads(r["extra_info"])["needle_window_s"] for r in train_rl]
    assert [json.loads(r["extra_info"])["needle_window_s"] for r in rl] != needles


def test_tiny_stages_train_with_paravt_trains_smoke_settings(tmp_path, monkeypatch):
    from paravt.train.smoke import SMOKE_RL, SMOKE_SFT, SMOKE_VIDEO

    setup = tiny_setup()
    data = {k: tmp_path / f"synth-k{k}" for k in setup.budgets}
    commands = []
    monkeypatch.setattr(reproduce, "_run", lambda cmd, log: (commands.append(cmd), (0, ""))[1])
    config = ReproduceConfig(out=tmp_path)
    for stage in ("sft", "grpo", "para_grpo"):
        assert train_stage(config, stage, tmp_path / "init", data, setup) is None
    sft, grpo, para = commands
    assert sft[4] == "tiny_sft" and all(o in sft for o in (*SMOKE_SFT, *SMOKE_VIDEO))
    assert all(str(d / "sft.parquet") in " ".join(sft) for d in data.values())
    assert grpo[4] == "tiny_vanilla_grpo" and para[4] == "tiny_paragrpo"
    for cmd in (grpo, para):
        assert all(o in cmd for o in (*SMOKE_RL, *SMOKE_VIDEO))
        assert any(a.startswith("data.parquet=") and "rl.parquet" in a for a in cmd)


def test_the_eval_agents_crops_show_at_most_max_crop_frames(synth_dir):
    import asyncio

    from paravt.core import CropVideoArgs
    from paravt.eval.video import ToolsVideoSource

    video = next((synth_dir / "videos").glob("*.mp4"))
    args = [CropVideoArgs(start_time=0.0, end_time=12.0)]
    (wide,) = asyncio.run(ToolsVideoSource(max_pixels=4096).toolbox(str(video)).execute(args))
    (narrow,) = asyncio.run(
        ToolsVideoSource(max_pixels=4096, max_crop_frames=4).toolbox(str(video)).execute(args)
    )
    assert len(wide.frames) == 12 and len(narrow.frames) == 4


def test_paper_splits_run_the_paravt_paper_tasks_and_report_a_metric_each_task_defines() -> None:
    import yaml

    from paravt.eval.cli import paper_task_dir
    from paravt.eval.reproduce import PAPER_COLUMNS, PAPER_GROUNDING_PROTOCOL, PAPER_PROTOCOL

    class TaskLoader(yaml.SafeLoader):
        """lmms-eval task YAML, its `!function` tags read as nothing."""

    TaskLoader.add_multi_constructor("!", lambda loader, suffix, node: None)

    def metrics_of(name: str) -> set[str]:
        doc = yaml.load((paper_task_dir() / name).read_text(encoding="utf-8"), Loader=TaskLoader)
        return {m["metric"] for m in doc.get("metric_list", [])}

    assert len(PAPER_COLUMNS) == 7
    for column in PAPER_COLUMNS:
        text = (paper_task_dir() / f"{column.task}.yaml").read_text(encoding="utf-8")
        assert f"task: {column.task}" in text
        # the MCQ splits may take their metric list from the shared include
        metrics = metrics_of(f"{column.task}.yaml") or metrics_of("_paravt_paper_mcq_metrics_yaml")
        assert column.metric in metrics, (column.task, metrics)
    assert PAPER_PROTOCOL["protocol"] == PAPER_GROUNDING_PROTOCOL["protocol"] == "paper"
    assert PAPER_GROUNDING_PROTOCOL["prompt_mode"] == "agentic_minimal"
