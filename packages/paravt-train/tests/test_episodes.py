"""Sampled episodes on disk (paravt.train.episodes): an RL run records them, resumes without
duplicates, and keeps the folder under its cap."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from paravt.core import parse_response
from paravt.core.episode import CallRecord
from paravt.core.episode_files import read_episodes, truncate_episodes
from paravt.core.episode_records import SCHEMA_VERSION, call_status, thumbnail_jpeg
from paravt.train.episodes import EpisodeRecorder, sample_indices
from paravt.train.rl import train_rl

from .rl_helpers import EveryOtherScripted, examples
from .test_rl import tiny_rl_recipe


def test_samples_spread_over_each_budget() -> None:
    budgets = [2, 2, 4, 4, 2, 2, 4, 4]
    assert sample_indices(budgets, 2) == [0, 2, 4, 6]
    assert sample_indices(budgets, 1) == [0, 2]
    assert sample_indices(budgets, 9) == list(range(8))
    assert sample_indices(budgets, 0) == []


def test_thumbnails_from_arrays_tensors_of_either_layout() -> None:
    from PIL import Image

    hwc = np.zeros((240, 320, 3), dtype=np.uint8)
    for img in (hwc, hwc.transpose(2, 0, 1), hwc.astype(np.float32) / 255.0):
        got = Image.open(__import__("io").BytesIO(thumbnail_jpeg(img)))
        assert got.format == "JPEG" and max(got.size) == 96 and got.size == (96, 72)


def test_a_call_is_named_by_the_parsers_issue() -> None:
    text = (
        "<think>x</think>"
        '<tool_call>{"name": "crop_video", "arguments": {"start_time": 8, "end_time": 8}}'
        "</tool_call><tool_call>{not json}</tool_call>"
        '<tool_call>{"name": "crop_video", "arguments": {"start_time": 1, "end_time": 2}}'
        "</tool_call>"
    )
    parsed = parse_response(text)
    bad_args = CallRecord(0, "crop_video", {"start_time": 8, "end_time": 8}, executed=False)
    bad_json = CallRecord(1, None, {}, executed=False, error="not valid JSON")
    ran = CallRecord(2, "crop_video", {}, executed=True, window_s=(1.0, 2.0))
    late = CallRecord(2, "crop_video", {}, executed=False, error="not executed: no turns left")
    assert call_status(bad_args, parsed) == ("invalid", "invalid_arguments")
    assert call_status(bad_json, parsed) == ("invalid", "invalid_json")
    assert call_status(ran, parsed) == ("ok", None)
    assert call_status(late, parsed) == ("not_executed", "not_executed")


@pytest.mark.slow
def test_an_rl_run_records_episodes_and_a_resume_does_not_repeat_steps(
    tiny_model_path: Path, tmp_path: Path
) -> None:
    exs, frames = examples()
    out = tmp_path / "run"
    recipe = tiny_rl_recipe(
        tiny_model_path, out, "logging.episodes_per_k=1", "checkpoint.every_steps=1"
    )
    train_rl(recipe, examples=exs, frames=frames, wrap_engine=EveryOtherScripted)
    rows = list(read_episodes(out))
    assert rows and {r["step"] for r in rows} == {1, 2}
    for r in rows:
        assert r["schema_version"] == SCHEMA_VERSION
        assert r["k"] in (2, 4) and r["weight_version"] == r["step"] - 1
        assert r["ground_truth"] in ("red", "blue", "green", "yellow")
        assert len(r["overview"]["frames"]) == r["k"]
        for f in r["overview"]["frames"]:
            assert f["t"] is not None and (out / "episodes" / f["image"]).is_file()
        assert set(r["reward"]) >= {"total", "accuracy", "format", "anchor", "tool", "penalty"}
        assert isinstance(r["format_ok"], bool) and isinstance(r["advantage"], float)
        assert r["turns"] and r["turns"][0]["text"]
    # per step: at most one episode per K
    for step in (1, 2):
        ks = [r["k"] for r in rows if r["step"] == step]
        assert len(ks) == len(set(ks))
    # a scripted rollout's two crops were answered by sub-agents with frames and a report
    calls = [c for r in rows for t in r["turns"] for c in t["calls"]]
    answered = [c for c in calls if c["subagent"]]
    if answered:
        c = answered[0]
        assert c["status"] == "ok" and c["window_s"] and c["subagent"]["frames"]
        assert (out / "episodes" / c["subagent"]["frames"][0]["image"]).is_file()
    metrics = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert all(m["time/episodes_s"] >= 0 for m in metrics)

    # a resume from step 1 with one more step: step 2 is recorded again once, step 3 added
    truncate_ckpt = sorted((out / "checkpoints").glob("step-*"))
    assert truncate_ckpt
    for ck in truncate_ckpt:
        if ck.name.endswith("2"):
            import shutil

            shutil.rmtree(ck)
    more = tiny_rl_recipe(
        tiny_model_path,
        out,
        "logging.episodes_per_k=1",
        "checkpoint.every_steps=1",
        "max_steps=3",
    )
    train_rl(more, resume=True, examples=exs, frames=frames, wrap_engine=EveryOtherScripted)
    again = list(read_episodes(out))
    per_step = {s: [r["index"] for r in again if r["step"] == s] for s in (1, 2, 3)}
    assert per_step[1] == [r["index"] for r in rows if r["step"] == 1]
    assert per_step[2] and len(per_step[2]) == len(set(per_step[2]))
    assert per_step[3]


def test_the_folder_stays_under_its_cap_and_a_resume_drops_later_steps(tmp_path: Path) -> None:
    root = tmp_path / "episodes"
    root.mkdir()
    lines = [{"step": s, "index": 0} for s in (1, 2, 3)]
    (root / "episodes.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in lines) + '{"step": 4, "cut'
    )
    for s in (1, 3):
        (root / "images" / f"step_{s:06d}").mkdir(parents=True)
    truncate_episodes(root, 2)
    assert [r["step"] for r in read_episodes(root)] == [1, 2]
    assert (root / "images" / "step_000001").is_dir()
    assert not (root / "images" / "step_000003").exists()

    rec = EpisodeRecorder(root, per_k=1, max_mib=0.0, start=2)
    assert rec.size > 0 and not rec.stopped
