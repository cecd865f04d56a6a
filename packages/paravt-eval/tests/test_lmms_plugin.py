"""lmms-eval integration: entry point, request handling, the offline tasks, the real CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from paravt.core.episode_files import read_episodes
from paravt.eval.metrics import mcq_score, record_trace, tool_scores
from paravt.eval.synth_tasks import (
    TASK_NAMES,
    process_grounding,
    process_mcq,
    synth_documents,
    write_synth_tasks,
)
from paravt.eval.traces import SampleTrace, read_traces

TWO_CALLS = (
    "The overview is sparse.</think>"
    '<tool_call>{"name": "crop_video", "arguments": {"start_time": 0, "end_time": 5}}</tool_call>'
    '<tool_call>{"name": "crop_video", "arguments": {"start_time": 5, "end_time": 10}}</tool_call>'
)


def test_lmms_eval_finds_the_paravt_chat_model_through_its_entry_point():
    from lmms_eval.models import get_model, get_model_manifest

    manifest = get_model_manifest("paravt")
    assert manifest.chat_class_path == "paravt.eval.lmms_model.ParaVT"
    cls = get_model("paravt")
    assert cls.__name__ == "ParaVT" and cls.is_simple is False


def test_a_chat_request_yields_the_samples_own_video_and_its_question():
    from paravt.eval.lmms_model import sample_from_messages

    messages = [
        {
            "role": "user",
            "content": [
                {"type": "video", "url": "/data/v1.mp4"},
                {"type": "text", "text": "Which colour?\nA. red\nB. blue"},
            ],
        }
    ]
    s = sample_from_messages(messages, task="t", doc_id=3, doc={})
    assert (s.video, s.question, s.key, s.doc_id) == (
        "/data/v1.mp4",
        "Which colour?\nA. red\nB. blue",
        "t/3",
        3,
    )
    with pytest.raises(ValueError, match="no video part"):
        sample_from_messages([{"role": "user", "content": "text only"}], task="t", doc_id=0, doc={})


def test_task_scores_read_tool_use_from_the_recorded_trace():
    doc = {"id": "x1", "question": "q", "answer": "B", "video": "/v.mp4", "paravt_options": ""}
    assert tool_scores(doc) == {"avg_tool_calls": 0.0, "tool_usage_rate": 0.0, "errored": 0.0}
    record_trace(doc, SampleTrace("paravt_synth_mcq", 0, "/v.mp4", "q", "B", num_tool_calls=3))
    assert process_mcq(doc, ["B"]) == {
        "accuracy": 1.0,
        "avg_tool_calls": 3.0,
        "tool_usage_rate": 1.0,
        "errored": 0.0,
    }
    assert process_mcq(doc, ["The answer is C"])["accuracy"] == 0.0
    g = {"id": "g1", "question": "when?", "answer": "[10, 20]", "video": "/v.mp4"}
    scores = process_grounding(g, ["[12, 20]"])
    assert scores["miou"] == pytest.approx(0.8)
    assert (scores["r@0.3"], scores["r@0.5"], scores["r@0.7"]) == (1.0, 1.0, 1.0)
    assert process_grounding(g, ["no idea"])["miou"] == 0.0


@pytest.fixture(scope="module")
def task_dir(synth_dir, tmp_path_factory) -> Path:
    return write_synth_tasks(synth_dir, tmp_path_factory.mktemp("tasks"), limit=4)


def test_a_prompt_stored_as_parts_gives_its_question_without_a_none(synth_dir, tmp_path):
    # A dataset that stores the prompt as a native list of parts (as Hugging Face datasets do)
    # reads back with every field on every part, the video part's text null; the question taken
    # from the prompt (no question in extra_info) must be the text part alone.
    import pyarrow as pa
    import pyarrow.parquet as pq

    video = next((synth_dir / "videos").glob("*.mp4"))
    prompt = [
        {
            "role": "user",
            "content": [
                {"type": "video", "video": str(video)},
                {"type": "text", "text": "Which colour is the square?\nA. red\nB. blue"},
            ],
        }
    ]
    table = pa.table(
        {
            "prompt": [prompt],
            "videos": [[{"video": str(video)}]],
            "extra_info": [json.dumps({"answer": "B", "question_type": "mcq"})],
        }
    )
    assert table.to_pylist()[0]["prompt"][0]["content"][0]["text"] is None  # the table's shape
    pq.write_table(table, tmp_path / "rl.parquet")
    (doc,) = synth_documents(tmp_path)["paravt_synth_mcq"]
    assert doc["question"] == "Which colour is the square?\nA. red\nB. blue"


def test_a_row_whose_answer_reads_back_null_is_refused(synth_dir, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from paravt.eval.synth_tasks import SynthDataError

    video = str(next((synth_dir / "videos").glob("*.mp4")))
    infos = [{"answer": "B", "question_type": "mcq"}, {"answer": None, "question_type": "mcq"}]
    table = pa.table(
        {
            "prompt": [[{"role": "user", "content": "<video>Which colour?"}]] * 2,
            "videos": [[{"video": video}]] * 2,
            "extra_info": infos,  # a struct column: the second row's answer is null
        }
    )
    pq.write_table(table, tmp_path / "rl.parquet")
    with pytest.raises(SynthDataError, match=r"rl\.parquet row 1: extra_info has no 'answer'"):
        synth_documents(tmp_path)


def test_the_synthetic_tasks_are_written_with_their_documents(task_dir):
    for name in TASK_NAMES:
        assert (task_dir / f"{name}.yaml").is_file()
        docs = [json.loads(x) for x in (task_dir / f"{name}.jsonl").read_text().splitlines()]
        assert 1 <= len(docs) <= 4
        assert all(Path(d["video"]).is_absolute() and Path(d["video"]).is_file() for d in docs)


def test_a_task_without_documents_leaves_no_earlier_documents_behind(synth_dir, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = write_synth_tasks(synth_dir, tmp_path / "tasks")  # every task has documents
    assert (out / "paravt_synth_oe.jsonl").is_file()
    only_mcq = tmp_path / "only_mcq"
    only_mcq.mkdir()
    video = str(next((synth_dir / "videos").glob("*.mp4")))
    table = pa.table(
        {
            "prompt": [[{"role": "user", "content": "<video>Which colour?\nA. red\nB. blue"}]],
            "videos": [[{"video": video}]],
            "extra_info": [json.dumps({"answer": "B", "question_type": "mcq"})],
        }
    )
    pq.write_table(table, only_mcq / "rl.parquet")
    write_synth_tasks(only_mcq, out)  # the same folder: the oe and grounding tasks are gone
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith("_")) == [
        "paravt_synth_mcq.jsonl",
        "paravt_synth_mcq.yaml",
    ]
    with pytest.raises(ValueError, match="limit must be at least 1"):
        write_synth_tasks(only_mcq, out, limit=0)


def test_each_synthetic_task_asks_for_its_own_kind_of_answer(task_dir):
    # An open question read as multiple choice is told to answer with a letter and, under the
    # paper's protocol (the default for a served model), graded on a letter it does not have: 0.
    from paravt.core.agent_protocol import PAPER_PROTOCOL as PAPER
    from paravt.eval.lmms_model import answer_kind_of
    from paravt.eval.synth_tasks import process_oe

    kinds = {
        "paravt_synth_mcq": "mcq",
        "paravt_synth_grounding": "grounding",
        "paravt_synth_oe": "open",
    }
    for name, kind in kinds.items():
        for doc in (json.loads(x) for x in (task_dir / f"{name}.jsonl").read_text().splitlines()):
            assert answer_kind_of(name, doc) == kind
            older = {k: v for k, v in doc.items() if k != "paravt_answer_kind"}  # written by 0.2.0
            assert answer_kind_of(name, older) == kind
    doc = json.loads((task_dir / "paravt_synth_oe.jsonl").read_text().splitlines()[0])
    final = f"<think>The square is there.</think><answer>{doc['answer']}</answer>"
    kept = PAPER.extract_answer(final, doc["answer"], answer_kind_of("paravt_synth_oe", doc))
    assert process_oe(doc, [kept])["accuracy"] == 1.0


@pytest.mark.slow
def test_the_lmms_eval_cli_runs_paravt_on_four_synthetic_mcq_samples(
    tiny_model, task_dir, tmp_path, offline_env
):
    out = tmp_path / "out"
    cmd = [
        sys.executable,
        "-m",
        "lmms_eval",
        "--model",
        "paravt",
        "--model_args",
        f"pretrained={tiny_model},protocol=paravt,main_nframes=4,max_new_tokens=24,"
        "subagent_max_new_tokens=8,max_pixels=4096",
        "--tasks",
        "paravt_synth_mcq",
        "--include_path",
        str(task_dir),
        "--output_path",
        str(out),
        "--log_samples",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=offline_env, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    [results_file] = list(out.rglob("*_results.json"))
    results = json.loads(results_file.read_text())["results"]["paravt_synth_mcq"]
    # traces sit beside the results
    [trace_file] = list(results_file.parent.glob("*_paravt_traces.jsonl"))
    traces = read_traces(trace_file)
    assert len(traces) == 4 and {t["task"] for t in traces} == {"paravt_synth_mcq"}
    n = len(traces)
    docs = [json.loads(x) for x in (task_dir / "paravt_synth_mcq.jsonl").read_text().splitlines()]
    by_id = {t["doc_id"]: t for t in traces}
    expected_acc = sum(mcq_score(by_id[i]["response"], d["answer"]) for i, d in enumerate(docs)) / n
    assert results["accuracy,none"] == pytest.approx(expected_acc)
    assert results["avg_tool_calls,none"] == pytest.approx(
        sum(t["num_tool_calls"] for t in traces) / n
    )
    assert results["tool_usage_rate,none"] == pytest.approx(
        sum(t["num_tool_calls"] > 0 for t in traces) / n
    )
    assert results["errored,none"] == sum(t["error"] is not None for t in traces) == 0
    summary = json.loads(trace_file.with_name(trace_file.stem + ".summary.json").read_text())
    assert summary["paravt_synth_mcq"]["samples"] == 4
    assert summary["paravt_synth_mcq"]["protocol"].startswith(
        "protocol: paravt v1 (protocol=paravt)"
    )
    assert summary["paravt_synth_mcq"]["avg_tool_calls"] == pytest.approx(
        results["avg_tool_calls,none"]
    )


@pytest.mark.slow
def test_tool_calls_of_an_episode_reach_the_lmms_eval_metrics(tiny_model, task_dir, tmp_path):
    """In-process lmms-eval with the first main turn scripted to call crop_video twice."""
    from lmms_eval import evaluator
    from lmms_eval.tasks import TaskManager

    from paravt.core.engines import ScriptedTurns
    from paravt.eval.lmms_model import ParaVT

    lm = ParaVT(
        pretrained=str(tiny_model),
        protocol="paravt",  # sub-agent summaries; the tiny model records no protocol
        main_nframes=4,
        max_new_tokens=16,
        subagent_max_new_tokens=8,
        max_pixels=4096,
        max_turns=2,
        traces=str(tmp_path / "t.jsonl"),
    )
    lm.agent.engine = ScriptedTurns(lm.agent.engine, {1: TWO_CALLS})
    out = evaluator.simple_evaluate(
        model=lm,
        tasks=["paravt_synth_mcq"],
        limit=2,
        task_manager=TaskManager("WARNING", include_path=str(task_dir), model_name="paravt"),
    )
    metrics = out["results"]["paravt_synth_mcq"]
    assert metrics["avg_tool_calls,none"] == 2.0
    assert metrics["tool_usage_rate,none"] == 1.0
    assert metrics["errored,none"] == 0
    traces = read_traces(tmp_path / "t.jsonl")
    assert [t["num_tool_calls"] for t in traces] == [2, 2]
    windows = [c["window_s"] for c in traces[0]["turns"][0]["calls"]]
    assert all(w is not None and w[0] < w[1] for w in windows)
    assert all(c["summary"] is not None for c in traces[0]["turns"][0]["calls"])
    # the first samples of the task are also episodes on disk (default 8 a task: both here)
    records = list(read_episodes(tmp_path / "t_episodes"))
    assert [(r["question_type"], r["reward"]) for r in records] == [("mcq", None)] * 2
    calls = [c for c in records[0]["turns"][0]["calls"]]
    assert [c["status"] for c in calls] == ["ok", "ok"] and all(c["subagent"] for c in calls)
    assert all(
        (tmp_path / "t_episodes" / f["image"]).is_file() for f in calls[0]["subagent"]["frames"]
    )
