"""`reproduce`: Table 2 in miniature end to end (`--quick`), its statistics and verdicts, caching,
and the paper-splits path's task wiring."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from paravt.eval.reproduce import ReproduceConfig, run_reproduce
from paravt.eval.reproduce.cells import settle_step
from paravt.eval.reproduce.claims import verdicts
from paravt.eval.reproduce.config import TASKS
from paravt.eval.reproduce.paper import PAPER_COLUMNS, PAPER_PROTOCOL, parse_checkpoints
from paravt.eval.reproduce.tables import Row, Summary, fmt, render_tables
from paravt.train.miniature import COSTLY_CONTEXT_TOKENS, DEFAULT_TASK
from paravt.train.miniature import TASKS as MINIATURE_TASKS


@pytest.mark.slow
def test_quick_reproduce_writes_table2_chart_and_results_and_reuses_every_finished_cell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    config = ReproduceConfig.quick(tmp_path / "rep")
    result = run_reproduce(config)
    md = result.markdown_path.read_text()
    assert "### (A) Training stage" in md and "### (C) Dispatch mode" in md
    # the default task is judged by the pre-registered rules, each with its rule and verdict
    assert "## Results: the paper's claims, by rules fixed before this run" in md
    assert "Parallel dispatch beats sequential" in md and "| A2 |" in md and "| C1 |" in md
    assert "format ok | leak |" in md  # the common format measure and the prior's leaks
    assert result.chart_path is not None and result.chart_path.stat().st_size > 10_000
    data = json.loads(result.json_path.read_text())
    assert data["seeds"] == [0, 1]
    assert data["setup"]["task"] == "prior_kept" and "Task variant `prior_kept`" in md
    assert data["setup"]["tool_fraction"] == 0.75 and "three quarters of them call the tool" in md
    assert data["setup"]["prior_steps"] == config.prior_steps and "Tool prior:" in md
    # the tool prior ran before the cold start, and the lr-0 control of vanilla GRPO is a row
    assert (config.out / "seed0" / "prior" / "done.json").is_file()
    control = data["rows"]["grpo_lr0"]
    assert len(control["curves"]) == 2 and all(x is not None for x in control["format_ok"])
    # every arm anchored at token level where the task says so (the recorded reward config)
    para = data["rows"]["para_grpo"]
    assert set(para["eval_kappa"]) == {f"K={k}" for k in config.eval_budgets}
    assert len(para["per_doc"]["K=8"][0]) == config.n_eval
    assert any(key.startswith("kappa/k") for key in para["curves"][0])  # kappa per budget
    assert len(para["curves"]) == 2 and len(para["curves"][0]["kappa"]) == config.rl_steps
    assert all(len(v) == 2 for v in para["accuracy"].values())  # one value per seed and K
    assert set(para["accuracy"]) == {f"K={k}" for k in config.eval_budgets}
    assert data["sequential"]["accuracy"]["K=2"][0] is not None
    assert config.eval_samples == 0 and para["sampled_accuracy"] == {}
    assert "Held-out accuracy sampled" not in md
    assert all(len(data["rows"][m]["f_tau"]) == 2 for m in ("base", "sft", "grpo"))
    # an accuracy cell's first held-out samples are also episodes, which the viewer reads
    from paravt.core.episode_files import read_episodes
    from paravt.eval.reproduce.cells import EPISODES_PER_CELL, episodes_dir

    shown = list(read_episodes(episodes_dir(config.out, 0, "para_grpo", "acc_k8")))
    assert 1 <= len(shown) <= EPISODES_PER_CELL and all(e["ground_truth"] for e in shown)

    # the sampled columns added to the finished run: nothing is trained again, each checkpoint
    # is sampled at every K (block C's sequential dispatch too: C1 reads it) and the table says
    # how
    import paravt.eval.agent as agent
    import paravt.train.rl as rl
    import paravt.train.sft as sft

    def boom(*args: object, **kwargs: object) -> None:
        pytest.fail("a finished run or cell was computed again")

    monkeypatch.setattr(sft, "train_sft", boom)
    monkeypatch.setattr(rl, "train_rl", boom)
    monkeypatch.setattr(rl, "evaluate", boom)
    config = config.model_copy(update={"eval_samples": 1})
    sampled = run_reproduce(config)
    data = json.loads(sampled.json_path.read_text())
    para = data["rows"]["para_grpo"]
    assert data["setup"]["eval_samples"] == 1
    assert set(para["sampled_accuracy"]) == {f"K={k}" for k in config.eval_budgets}
    assert len(para["sampled_per_doc"]["K=8"][0]) == config.n_eval
    assert set(data["sequential"]["sampled_accuracy"]) == {f"K={k}" for k in config.eval_budgets}
    md = sampled.markdown_path.read_text()
    assert "### Held-out accuracy sampled: 1 episode per question at temperature 0.7" in md

    # a second invocation trains and evaluates nothing: every run and cell is reused
    monkeypatch.setattr(agent.EvalAgent, "run", boom)
    again = run_reproduce(config)
    assert json.loads(again.json_path.read_text())["rows"] == data["rows"]


def _row(name: str, f_tau, kappa, acc) -> Row:
    return Row(name, f_tau=list(f_tau), kappa=list(kappa), accuracy={4: list(acc), 2: list(acc)})


def _summary() -> Summary:
    rows = {
        "base": _row("base", [0.05, 0.06, 0.04], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]),
        "sft": _row("sft", [0.9, 0.8, 0.85], [0.6, 0.7, 0.5], [0.5, 0.6, 0.55]),
        "grpo": _row("grpo", [0.9, 0.9, 0.9], [0.1, 0.5, 0.1], [0.55, 0.6, 0.5]),
        "para_grpo": _row("para_grpo", [1.0, 1.0, 1.0], [1.9, 1.8, 2.0], [0.9, 0.85, 0.95]),
        "anchoring_only": _row("anchoring_only", [1.0, 0.8, 1.0], [0.1, 0.1, 0.3], [0.6] * 3),
        "gating_only": _row("gating_only", [0.9, 0.9, 0.9], [1.5, 1.6, 1.4], [0.9, 0.9, 0.96]),
    }
    sequential = _row("para_grpo_sequential", [], [], [0.8, 0.85, 0.9])
    return Summary([0, 1, 2], [4, 2], rows, sequential, setup={})


def test_cells_show_mean_and_sample_sd_over_seeds_and_every_block() -> None:
    assert fmt([0.5, 0.6, 0.55], scale=100, digits=1) == "55.0 ± 5.0"
    assert fmt([0.5]) == "0.50"  # one seed: no spread
    assert fmt([None, None]) == "-"
    md = "\n".join(render_tables(_summary()))
    assert "### (B) Component effectiveness" in md
    assert "| + SFT + PARA-GRPO | 1.00 ± 0.00 | 1.90 ± 0.10 | 90.0 ± 5.0 | 90.0 ± 5.0 |" in md
    assert "| Full PARA-GRPO |" in md and "| SFT + GRPO |" in md
    assert "| parallel - sequential (paired by seed) | | 5.0 ± 5.0 | 5.0 ± 5.0 |" in md


def test_verdicts_are_paired_by_seed_and_say_mixed_when_not_every_seed_agrees() -> None:
    by_claim = {v.claim.split(" (")[0]: v.verdict for v in verdicts(_summary())}
    assert by_claim["SFT cold start transfers the tool-call format"] == "shown"
    assert by_claim["Vanilla GRPO collapses tool calls"] == "mixed"  # lower, not below half
    assert by_claim["nFrames Gating keeps tools in use"] == "shown"
    # GRPO below half of SFT's kappa in seeds 0 and 2 only (0.5 vs 0.7 in seed 1)
    assert by_claim["PARA-GRPO keeps the tool in use where vanilla GRPO drops it"] == "mixed"
    # anchoring alone: f_tau +0.1, -0.1, +0.1 against GRPO
    assert by_claim["Exploration Anchoring keeps the format under temperature"] == "mixed"
    # PARA-GRPO beats GRPO and anchoring alone in every seed, gating alone in 2 of 3
    assert by_claim["Only anchoring and gating together win"] == "mixed"
    assert by_claim["Parallel dispatch beats sequential at the same checkpoint and max_turns"] == (
        "mixed"  # +0.1, 0, +0.05: not in every seed
    )
    assert by_claim["PARA-GRPO improves on the SFT cold start"] == "shown"


def test_the_paradox_claim_needs_the_collapse_and_the_kept_calls_in_every_seed() -> None:
    def claim(grpo_kappa: list[float], para_kappa: list[float]) -> str:
        s = _summary()
        s.rows["grpo"].kappa = grpo_kappa
        s.rows["para_grpo"].kappa = para_kappa
        by_claim = {v.claim.split(" (")[0]: v.verdict for v in verdicts(s)}
        return by_claim["PARA-GRPO keeps the tool in use where vanilla GRPO drops it"]

    assert claim([0.0, 0.02, 0.1], [1.9, 0.3, 0.5]) == "shown"  # SFT 0.6, 0.7, 0.5
    assert claim([0.0, 0.02, 0.1], [1.9, 0.03, 0.5]) == "mixed"  # seed 1 kept nothing either
    assert claim([0.0, 0.02, 0.1], [0.05, 0.03, 0.15]) == "not shown"  # nobody kept calls
    assert claim([1.5, 1.6, 1.4], [1.9, 1.8, 2.0]) == "not shown"  # no collapse to prevent


def test_settle_step_is_where_the_moving_average_stops_moving() -> None:
    ramp = [0.1 * i for i in range(10)] + [1.0] * 20
    step = settle_step(ramp, tolerance=0.1)
    assert step is not None and 10 <= step <= 14
    assert settle_step([1.0] * 20, tolerance=0.1) == 5
    assert settle_step([1.0] * 6, tolerance=0.1) is None  # too short to tell


def test_an_interrupted_run_is_trained_again_and_other_settings_are_an_error(
    tmp_path: Path,
) -> None:
    from paravt.eval.reproduce.training import _finished, _mark_done

    run = tmp_path / "seed0" / "grpo"
    (run / "final").mkdir(parents=True)
    assert _finished(run, {"steps": 30}) is None and not run.exists()  # no done.json: again
    (run / "final").mkdir(parents=True)
    _mark_done(run, {"steps": 30}, 12.5)
    assert _finished(run, {"steps": 30}) == 12.5
    with pytest.raises(ValueError, match="use another --out or delete that directory"):
        _finished(run, {"steps": 40})


def test_prior_kept_keeps_its_prior_in_the_cold_start_and_zero_prior_steps_drop_all_of_it(
    tmp_path: Path,
) -> None:
    """The task issue 45's probes chose: its cold start trains on the teacher traces and the
    prior's calling traces (drawn by the seed); `--prior-steps 0` trains neither the prior
    stage nor any of its traces, rather than failing or mixing in a prior it never made."""
    from paravt.eval.reproduce.training import ensure_data, task_of
    from paravt.train import miniature as m

    config = ReproduceConfig.quick(tmp_path, task="prior_kept", n_sft_videos=4)
    data = ensure_data(config)
    task = task_of(config)
    assert task.cold_prior_mix == m.PRIOR_KEPT_MIX and set(data.prior) == {2, 4, 8}
    cold = m.sft_recipe(tmp_path / "sft", tmp_path / "m", data, seed=1, task=task)
    name = f"prior-sub-mix{m.PRIOR_KEPT_MIX:g}-s1.parquet"
    mixed = [str(p.with_name(name)) for p in data.prior.values()]
    assert cold.data.parquet == [*map(str, data.sft.values()), *mixed]
    bare = ReproduceConfig.quick(
        tmp_path / "bare", task="prior_kept", n_sft_videos=4, prior_steps=0
    )
    bare_data = ensure_data(bare)
    assert not bare_data.prior and task_of(bare).cold_prior_mix == 0.0
    bare_cold = m.sft_recipe(tmp_path / "s2", tmp_path / "m", bare_data, seed=1, task=task_of(bare))
    assert bare_cold.data.parquet == [str(p) for p in bare_data.sft.values()]


def test_config_errors_name_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="each block is one of A, B, C"):
        ReproduceConfig(out=tmp_path, blocks=("A", "D"))
    with pytest.raises(ValueError, match="add --paper-splits"):
        ReproduceConfig(out=tmp_path, checkpoints=f"base={tmp_path}")


def test_the_task_variants_named_in_the_config_are_the_miniatures() -> None:
    assert set(TASKS) == set(MINIATURE_TASKS) and ReproduceConfig().task == DEFAULT_TASK
    with pytest.raises(ValueError, match=r"task .cheap.: one of prior, prior_kept, costly, plain"):
        ReproduceConfig(task="cheap")


def test_each_task_puts_its_settings_in_every_arms_recipe(tmp_path: Path) -> None:
    from paravt.train import miniature as m

    costly = m.rl_recipe(
        tmp_path / "c",
        tmp_path,
        tmp_path / "rl.parquet",
        arm=m.ARMS["grpo"],
        task=m.TASKS["costly"],
    )
    assert costly.rollout.max_context_tokens == COSTLY_CONTEXT_TOKENS
    prior = m.TASKS["prior"]
    para = m.rl_recipe(
        tmp_path / "p", tmp_path, tmp_path / "rl.parquet", arm=m.ARMS["para_grpo"], task=prior
    )
    # the paper's anchoring (token level, tool-call boundaries) and a gate with the dense budget
    assert para.advantage.token_level_anchoring and para.reward.build().anchor_tool_calls
    assert max(para.gating.choices) == prior.fixed_k and para.video.max_crop_frames == 8
    seq = m.rl_recipe(
        tmp_path / "s",
        tmp_path,
        tmp_path / "rl.parquet",
        arm=m.ARMS["para_grpo_sequence"],
        task=prior,
    )
    assert not seq.advantage.token_level_anchoring and seq.reward.build().anchoring == "sequence"
    control = m.rl_recipe(
        tmp_path / "z", tmp_path, tmp_path / "rl.parquet", arm=m.ARMS["grpo_lr0"], task=prior
    )
    assert control.optim.lr == m.LR_ZERO and not control.gating.enabled


def test_checkpoints_are_parsed_per_stage_with_errors_naming_the_fix(tmp_path: Path) -> None:
    assert parse_checkpoints(f"base={tmp_path}, sft={tmp_path}") == {
        "base": tmp_path,
        "sft": tmp_path,
    }
    with pytest.raises(ValueError, match="stage one of base, sft, grpo, para_grpo"):
        parse_checkpoints(f"rl={tmp_path}")
    with pytest.raises(ValueError, match="not a checkpoint directory"):
        parse_checkpoints(f"base={tmp_path / 'x'}")


def test_the_eval_agents_crops_show_at_most_max_crop_frames(synth_dir: Path) -> None:
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

    from paravt.eval.paper_tasks import paper_task_dir

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
    assert PAPER_PROTOCOL == {"protocol": "paper"}  # its prompt modes: the driver's per split


def test_paper_splits_on_a_local_checkpoint_run_all_seven_splits_charades_in_its_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One lmms-eval run per checkpoint whose model arguments the plugin accepts (a local
    checkpoint cannot take video_url); Charades-STA asked in agentic_minimal; Table 1 with the
    channel note and the errored samples."""
    from paravt.eval.config import parse_eval_config
    from paravt.eval.reproduce import paper

    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    ckpt.mkdir()
    commands: list[list[str]] = []

    def fake_lmms_eval(cmd: list[str], log_path: Path) -> tuple[int, str]:
        commands.append(cmd)
        args = dict(kv.split("=", 1) for kv in cmd[cmd.index("--model_args") + 1].split(","))
        protocol = parse_eval_config(args).resolved_protocol()  # what the plugin does first
        assert protocol.for_question("mcq").prompt_mode == "agentic_general"
        assert protocol.for_question("grounding").prompt_mode == "agentic_minimal"
        tasks = cmd[cmd.index("--tasks") + 1].split(",")
        values = {"accuracy,none": 0.5, "miou,none": 0.4, "errored,none": 0}
        results = {t: {**values, "errored,none": int("charades" in t)} for t in tasks}
        run_dir = Path(cmd[cmd.index("--output_path") + 1]) / "model"
        run_dir.mkdir(parents=True)
        (run_dir / "x_results.json").write_text(json.dumps({"results": results}))
        reason = {"unreadable request: FileNotFoundError": {"count": 1, "example": "doc 3: ..."}}
        summary = {"paravt_paper_charades": {"errored": 1, "errors": reason}}
        (out / "traces").mkdir(parents=True, exist_ok=True)
        Path(args["traces"]).with_suffix(".summary.json").write_text(json.dumps(summary))
        return 0, ""

    monkeypatch.setattr(paper, "_run", fake_lmms_eval)
    md = "\n".join(paper.run_paper_splits(out, f"para_grpo={ckpt}", "cpu"))
    [cmd] = commands
    assert cmd[cmd.index("--tasks") + 1].split(",") == [c.task for c in PAPER_COLUMNS]
    assert "| para_grpo | 50.0 | 50.0 | 50.0 | 50.0 | 50.0 | 50.0 | 40.0 | 48.6 |" in md
    assert "Charades-STA: overview frames as images" in md
    assert (
        "Errored samples (scored wrong): para_grpo Charades-STA (mIoU): 1 "
        "(unreadable request: FileNotFoundError x1)." in md
    )


def test_arms_right_and_wrong_on_the_same_questions_are_grouped() -> None:
    from paravt.eval.reproduce.run import same_answers

    answers = {
        "sft": [1.0, 0.0],
        "grpo": [1.0, 0.0],
        "para_grpo": [1.0, 0.0],
        "gating_only": [0.0, 1.0],
        "no_gamma": [0.0, 1.0],
        "anchoring_only": [1.0, 1.0],
    }
    assert same_answers(answers) == [["grpo", "para_grpo"], ["gating_only", "no_gamma"]]


def test_paper_splits_over_servers_run_all_seven_splits_with_the_drivers_channels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A served stage: every split over the servers (no transformers, no --batch_size), the
    served model's name read from /models, Charades-STA through the video_url channel."""
    from paravt.core.testing.stand_in import FakeChatServer
    from paravt.eval.config import parse_eval_config
    from paravt.eval.reproduce import paper

    out = tmp_path / "out"
    commands: list[list[str]] = []

    def fake_lmms_eval(cmd: list[str], log_path: Path) -> tuple[int, str]:
        commands.append(cmd)
        args = dict(kv.split("=", 1) for kv in cmd[cmd.index("--model_args") + 1].split(","))
        config = parse_eval_config(args)
        assert config.pretrained is None and len(config.base_urls) == 2 and config.model == "qwen"
        tasks = cmd[cmd.index("--tasks") + 1].split(",")
        protocol = config.resolved_protocol()
        assert protocol.for_question("mcq", served=True).overview.channel == "images"
        assert protocol.for_question("grounding", served=True).overview.channel == "video_url"
        results = {t: {"accuracy,none": 0.5, "miou,none": 0.4, "errored,none": 0} for t in tasks}
        run_dir = Path(cmd[cmd.index("--output_path") + 1]) / "model"
        run_dir.mkdir(parents=True)
        (run_dir / "x_results.json").write_text(json.dumps({"results": results}))
        return 0, ""

    monkeypatch.setattr(paper, "_run", fake_lmms_eval)
    with FakeChatServer(lambda body: "", model="qwen") as a, FakeChatServer(lambda b: "") as b:
        md = "\n".join(paper.run_paper_splits(out, f"para_grpo={a.base_url}|{b.base_url}", "cpu"))
    assert len(commands) == 1 and all("--batch_size" not in cmd for cmd in commands)
    ran = [t for cmd in commands for t in cmd[cmd.index("--tasks") + 1].split(",")]
    assert sorted(ran) == sorted(c.task for c in PAPER_COLUMNS)
    assert "| para_grpo | 50.0 | 50.0 | 50.0 | 50.0 | 50.0 | 50.0 | 40.0 | 48.6 |" in md
    assert "Charades-STA through the video_url channel" in md
    with pytest.raises(ValueError, match="cannot read the served model's name"):
        paper.run_paper_splits(tmp_path / "o2", "base=http://127.0.0.1:9/v1", "cpu")


def test_checkpoints_may_be_served(tmp_path: Path) -> None:
    from paravt.eval.reproduce.paper import Servers

    parsed = parse_checkpoints(f"base={tmp_path},para_grpo=http://a:1/v1|http://b:2/v1")
    assert parsed == {"base": tmp_path, "para_grpo": Servers("http://a:1/v1|http://b:2/v1")}


def test_a_sampled_cell_asks_each_question_n_times_seeded_and_keeps_per_question_means(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import paravt.eval.reproduce.cells as cells
    from paravt.eval.traces import SampleTrace

    made: list[Any] = []

    class FakeAgent:
        """Answers 'red' on the first sample of each question and 'blue' on the others."""

        def __init__(self, config: Any) -> None:
            made.append(config)

        def run(self, questions: list[Any]) -> list[SampleTrace]:
            made.append([q.key for q in questions])
            return [
                SampleTrace(q.task, q.doc_id, q.video, q.question, response="red")
                if q.key.endswith("#0")
                else SampleTrace(q.task, q.doc_id, q.video, q.question, response="blue")
                for q in questions
            ]

    monkeypatch.setattr(cells, "EvalAgent", FakeAgent)
    docs = [
        {"id": "a", "video": "a.mp4", "question": "What colour?", "answer": "red"},
        {"id": "b", "video": "b.mp4", "question": "What colour?", "answer": "blue"},
    ]
    config = ReproduceConfig.quick(tmp_path / "rep", eval_samples=3)
    cell = cells.accuracy_cell(config, 5, "sft", tmp_path, 2, docs, "paravt", samples=3)
    eval_config, keys = made
    assert eval_config.temperature == 0.7 and eval_config.seed == 5  # the training seed's draws
    assert keys == ["a#0", "a#1", "a#2", "b#0", "b#1", "b#2"]
    # a: right once in three, b: right twice in three; calls and samples recorded
    assert cell["per_doc"] == pytest.approx([1 / 3, 2 / 3]) and cell["accuracy"] == 0.5
    assert cell["samples"] == 3 and cell["temperature"] == 0.7
    assert cells.cell_path(config.out, 5, "sft", "sampled3_k2").is_file()
    greedy = cells.accuracy_cell(config, 5, "sft", tmp_path, 2, docs, "paravt")
    assert made[2].temperature == 0.0 and made[2].seed is None and made[3] == ["a", "b"]
    assert greedy["per_doc"] == [0.0, 1.0] and greedy["samples"] == 1


def test_the_sampled_table_pairs_each_rows_questions_with_the_sft_policys() -> None:
    summary = _summary()
    summary.setup.update(eval_samples=4, eval_temperature=0.7)
    sft, para = summary.rows["sft"], summary.rows["para_grpo"]
    for row, per_doc in ((sft, [[0.0, 0.5], [0.25, 0.25]]), (para, [[0.5, 1.0], [0.25, 0.75]])):
        for k in (4, 2):
            row.sampled[k] = [sum(d) / len(d) for d in per_doc]
            row.sampled_kappa[k] = [1.0, 1.5]
            row.sampled_per_doc[k] = per_doc
    text = "\n".join(render_tables(summary))
    assert "### Held-out accuracy sampled: 4 episodes per question at temperature 0.7" in text
    # per-question differences +0.5, +0.5, 0, +0.5: mean +37.5 points, standard error 12.5
    section = text.split("Held-out accuracy sampled")[1]
    line = next(x for x in section.splitlines() if x.startswith("| + SFT + PARA-GRPO |"))
    assert line.endswith("| +37.5 ± 12.5 | +37.5 ± 12.5 |")
    assert "| 1.25 ± 0.35 |" in line  # calls per episode over seeds
    assert "| + SFT + GRPO |" not in section  # rows not sampled are left out
