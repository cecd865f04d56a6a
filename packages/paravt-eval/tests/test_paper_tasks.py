"""The `paravt_paper` task group through the real lmms-eval CLI, on fixture documents in each
dataset's real row schema, with a real clip where each split's videos are looked for.

Each shipped task YAML is included as is; the fixture YAML only swaps the Hub dataset for a JSONL
of rows with the real columns. A fake OpenAI-compatible server answers: `B` for multiple choice,
`The event happens in the 2.0 - 6.5 seconds.` for grounding.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from paravt.core.paper_protocol import (
    PAPER_GENERAL_AGENTIC_SYSTEM,
    PAPER_MINIMAL_AGENTIC_SYSTEM,
    PAPER_TOOL_SCHEMA,
)
from paravt.core.testing.stand_in import FakeChatServer
from paravt.eval.paper_tasks import SPLITS, paper_task_dir, parse_srt

OPTIONS4 = ["A. A horse.", "B. A bicycle.", "C. A car.", "D. A boat."]
SRT = "1\n00:00:00,000 --> 00:00:02,000\nHello <i>there</i>\n\n2\n00:00:02,000 --> 00:00:04,000\nA bike.\n"


def rows() -> dict[str, list[dict[str, Any]]]:
    """Two documents per split (answer B: right, answer C: wrong; Charades: one missing video)."""
    vmme = [
        {
            "video_id": f"00{i}",
            "duration": duration,
            "domain": "Knowledge",
            "sub_category": "Humanity & History",
            "url": f"https://www.youtube.com/watch?v=vid{i}",
            "videoID": f"vid{i}",
            "question_id": f"00{i}-1",
            "task_type": "Object Recognition",
            "question": "What does the person ride?",
            "options": OPTIONS4,
            "answer": answer,
        }
        for i, (duration, answer) in enumerate([("short", "B"), ("long", "C")])
    ]
    lvb = [
        {
            "video_id": f"lvb{i}",
            "question": "What does the person ride?",
            "question_wo_referring_query": "What does the person ride?",
            "option0": "A horse",
            "option1": "A bicycle",
            "option2": "A car",
            "option3": "N/A",
            "option4": "",
            "correct_choice": choice,
            "position": [1, 2],
            "topic_category": "S",
            "question_category": "S2E",
            "level": "L1-Perception",
            "id": f"lvb{i}_0",
            "video_path": f"lvb{i}.mp4",
            "subtitle_path": f"lvb{i}_en.json",
            "duration_group": 15,
            "starting_timestamp_for_subtitles": 0,
            "duration": 10.0,
            "view_count": 1,
        }
        for i, choice in enumerate([1, 2])
    ]
    lvbench = [
        {
            "key": f"k{i}",
            "type": "sports",
            "uid": str(i),
            "video_path": f"lvbench{i}.mp4",
            "question": "What does the person ride?\n(A) A horse\n(B) A bicycle\n(C) A car\n(D) A boat",
            "answer": answer,
            "question_type": ["entity recognition"],
            "time_reference": "00:01-00:05",
        }
        for i, answer in enumerate(["B", "C"])
    ]
    mlvu = [
        {
            "video_name": f"mlvu{i}.mp4",
            "duration": 10.0,
            "question": "What does the person ride?",
            "candidates": ["A horse", "A bicycle", "A car", "A boat"],
            "answer": answer,
            "question_id": f"q{i}",
            "task_type": "plotQA",
        }
        for i, answer in enumerate(["A bicycle", "A car"])
    ]
    mmvu = [
        {
            "id": f"mmvu{i}",
            "question": "What does the person ride?",
            "choices": {"A": "A horse", "B": "A bicycle", "C": "A car", "D": "", "E": None},
            "answer": answer,
            "video": f"https://huggingface.co/datasets/yale-nlp/MMVU/resolve/main/videos/Art/{i}.mp4",
            "subject": "Art",
            "question_type": "multiple-choice",
            "youtube_url": "",
            "textbook": "",
        }
        for i, answer in enumerate(["B", "C"])
    ]
    charades = [
        {"video": "C1.mp4", "caption": "a person rides a bike", "timestamp": [2.0, 7.0]},
        {"video": "missing.mp4", "caption": "a person opens a door", "timestamp": [1.0, 3.0]},
    ]
    return {
        "videomme": vmme,
        "videomme_wsub": vmme,
        "longvideobench": lvb,
        "lvbench": lvbench,
        "mlvu": mlvu,
        "mmvu": mmvu,
        "charades": charades,
    }


def place_videos(home: Path, mmvu_dir: Path, clip: Path) -> None:
    """bikes.mp4 where the driver looks for each split's videos."""
    targets = [home / "videomme" / "data" / f"vid{i}.mp4" for i in range(2)]
    targets += [home / "datasets" / "longvideobench" / "videos" / f"lvb{i}.mp4" for i in range(2)]
    targets += [home / "lvbench" / f"lvbench{i}.mp4" for i in range(2)]
    targets += [home / "MLVU" / "video" / f"mlvu{i}.mp4" for i in range(2)]
    targets += [mmvu_dir / "videos" / "Art" / f"{i}.mp4" for i in range(2)]
    targets += [home / "charades_sta" / "Charades_v1_480" / "C1.mp4"]
    for t in targets:
        t.parent.mkdir(parents=True, exist_ok=True)
        t.symlink_to(clip)
    subs = home / "videomme" / "subtitle"
    subs.mkdir(parents=True)
    (subs / "vid0.srt").write_text(SRT)  # vid1 has none: no prefix, as in the driver


def fixture_tasks(root: Path) -> Path:
    root.mkdir(parents=True)
    shipped = paper_task_dir()
    for split, docs in rows().items():
        (root / f"{split}.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
        (root / f"fixture_{split}.yaml").write_text(
            f"include: {shipped / f'paravt_paper_{split}.yaml'}\n"
            f"task: fixture_paravt_paper_{split}\n"
            "dataset_path: json\n"
            "dataset_name: null\n"
            f"dataset_kwargs:\n  data_files:\n    {_split(split)}: {root / f'{split}.jsonl'}\n"
        )
    return root


def _split(split: str) -> str:
    return {"longvideobench": "validation", "lvbench": "train", "mmvu": "validation"}.get(
        split, "test"
    )


def reply(body: dict[str, Any]) -> str:
    text = json.dumps(body["messages"])
    if "find the visual event" in text:
        return "The event happens in the 2.0 - 6.5 seconds."
    return "<think>A bicycle.</think><answer>B</answer>"


def test_subtitles_are_read_as_the_driver_reads_them(tmp_path):
    path = tmp_path / "a.srt"
    path.write_text(SRT)
    assert parse_srt(path) == "Hello there\nA bike."
    assert parse_srt(tmp_path / "none.srt") == ""


@pytest.mark.slow
def test_lmms_eval_finds_the_paper_group_and_its_seven_tasks():
    from lmms_eval.tasks import TaskManager

    manager = TaskManager("WARNING", include_path=str(paper_task_dir()))
    assert "paravt_paper" in manager.all_groups
    assert {f"paravt_paper_{s}" for s in SPLITS} <= set(manager.all_tasks)


@pytest.mark.slow
def test_the_seven_paper_tasks_run_and_score_through_the_lmms_eval_cli(
    bikes_mp4, tmp_path, offline_env
):
    home, mmvu = tmp_path / "hf", tmp_path / "mmvu"
    place_videos(home, mmvu, bikes_mp4)
    tasks = fixture_tasks(tmp_path / "tasks")
    traces = tmp_path / "traces.jsonl"
    env = dict(offline_env, HF_HOME=str(home), PARAVT_MMVU_VIDEO_DIR=str(mmvu))
    names = [f"fixture_paravt_paper_{s}" for s in SPLITS]
    with FakeChatServer(reply) as server:
        cmd = [
            sys.executable,
            "-m",
            "lmms_eval",
            "--model",
            "paravt",
            "--model_args",
            f"base_url={server.base_url},model=fake,protocol=paper,main_nframes=8,traces={traces}",
            "--tasks",
            ",".join(names),
            "--include_path",
            str(tasks),
            "--output_path",
            str(tmp_path / "out"),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
        bodies = list(server.bodies)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    [results_file] = list((tmp_path / "out").rglob("*_results.json"))
    results = json.loads(results_file.read_text())["results"]
    for split in SPLITS[:-1]:
        r = results[f"fixture_paravt_paper_{split}"]
        assert r["accuracy,none"] == pytest.approx(0.5), (split, r)
        assert r["errored,none"] == 0, (split, r)
    vmme = results["fixture_paravt_paper_videomme"]
    assert (vmme["acc_short,none"], vmme["acc_long,none"]) == (1.0, 0.0)
    charades = results["fixture_paravt_paper_charades"]
    assert charades["miou,none"] == pytest.approx(0.45)  # IoU 0.9 and the errored sample's 0
    assert charades["r@0.7,none"] == 0.5 and charades["errored,none"] == 1
    # one run, the driver's prompt modes: agentic_general for MCQ, agentic_minimal for Charades-STA
    systems: dict[str, set[str]] = {}
    for b in bodies:
        kind = "grounding" if "find the visual event" in json.dumps(b["messages"]) else "mcq"
        systems.setdefault(kind, set()).add(b["messages"][0]["content"])
    assert systems == {
        "mcq": {PAPER_GENERAL_AGENTIC_SYSTEM.format(tool_schema=PAPER_TOOL_SCHEMA)},
        "grounding": {PAPER_MINIMAL_AGENTIC_SYSTEM.format(tool_schema=PAPER_TOOL_SCHEMA)},
    }
    # the requests: the driver's question layout, subtitles and video-path suffix
    users = [
        next(p["text"] for p in reversed(b["messages"][1]["content"]) if p["type"] == "text")
        for b in bodies
    ]
    with_subs = [u for u in users if u.startswith("This video's subtitles are listed below:")]
    assert len(with_subs) == 1
    assert with_subs[0].startswith(
        "This video's subtitles are listed below:\nHello there\nA bike.\n\nQuestion: What does"
    )
    assert "\nOptions:\nA. A. A horse.\nB. B. A bicycle." in with_subs[0]
    assert with_subs[0].endswith(
        "Answer with the option letter only. The video path for this video is: vid0.mp4"
    )
    mmvu_q = next(u for u in users if u.endswith("video is: 0.mp4"))
    assert "\nOptions:\nA. A horse\nB. A bicycle\nC. A car\nAnswer with" in mmvu_q  # empty D, E out
    lvbench_q = next(u for u in users if u.endswith("video is: lvbench0.mp4"))
    assert lvbench_q == (
        "What does the person ride?\n(A) A horse\n(B) A bicycle\n(C) A car\n(D) A boat\n"
        "Answer with the option letter only. The video path for this video is: lvbench0.mp4"
    )
    lvb_q = next(u for u in users if u.endswith("video is: lvb0.mp4"))
    assert "\nOptions:\nA. A horse\nB. A bicycle\nC. A car\nAnswer with" in lvb_q  # N/A, '' out
    rows_ = [json.loads(x) for x in traces.read_text().splitlines()]
    assert len(rows_) == 14
    assert [r["task"] for r in rows_ if r["error"]] == ["fixture_paravt_paper_charades"]
    # how many errored and why, beside the results
    summary = json.loads(traces.with_name(traces.stem + ".summary.json").read_text())
    errors = summary["fixture_paravt_paper_charades"]["errors"]
    [(reason, entry)] = errors.items()
    assert reason == "unreadable request: FileNotFoundError" and entry["count"] == 1
    assert "missing.mp4" in entry["example"]
    assert summary["fixture_paravt_paper_charades"]["protocol"].startswith("protocol: paper v3")
