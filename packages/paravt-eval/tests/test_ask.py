"""`paravt-eval ask`: one question about one video, shown for a person or as JSON."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from paravt.eval.cli import main

FAST = ["--nframes", "4", "--max-new-tokens", "16", "--max-pixels", "4096"]


@pytest.mark.slow
def test_ask_prints_the_episode_of_the_tiny_model_on_bikes(tiny_model, bikes_mp4, offline_env):
    cmd = [
        sys.executable,
        "-m",
        "paravt.eval.cli",
        "ask",
        "--model",
        str(tiny_model),
        "--video",
        str(bikes_mp4),
        "How many bikes are there?",
        *FAST,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=offline_env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    # the first line says which protocol and why: the tiny model records none -> the paper's
    assert out.splitlines()[0] == (
        f"protocol: paper v3 (no recorded protocol in {tiny_model}); prompt mode "
        "agentic_general, grounding questions agentic_minimal"
    )
    for expected in (
        "paravt ask",
        "bikes.mp4",
        "10.0 s",
        "4 frames",
        "turn 1",
        "result",
        "tool calls",
        "prepare",
    ):
        assert expected in out, out


@pytest.mark.slow
def test_ask_json_describes_a_synthetic_video_episode(tiny_model, synth_dir, capsys):
    video = sorted(synth_dir.rglob("*.mp4"))[0]
    code = main(
        [
            "ask",
            "--model",
            str(tiny_model),
            "--video",
            str(video),
            "--json",
            "What colour is the shape?",
            *FAST,
        ]
    )
    assert code == 0
    trace = json.loads(capsys.readouterr().out)
    assert trace["error"] is None
    assert trace["video"] == str(video)
    assert trace["overview_frames"] == 4
    assert trace["duration_s"] > 0
    assert 1 <= len(trace["turns"]) <= 3
    assert trace["turns"][0]["num_tokens"] >= 1


@pytest.mark.slow
def test_ask_trace_writes_the_episode_that_the_viewer_shows(
    tiny_model, synth_dir, tmp_path, capsys
):
    """`ask --trace DIR` appends the episode in the RL runs' schema (no reward: no ground truth),
    thumbnails beside it; a second ask appends a second record; the episodes command of
    paravt-train (installed beside in the workspace) summarises the folder and writes its page."""
    video = sorted(synth_dir.rglob("*.mp4"))[0]
    out = tmp_path / "asked"
    for question in ("What colour is the shape?", "When does the shape appear?"):
        assert main(["ask", "--model", str(tiny_model), "--video", str(video), "--trace", str(out),
                     "--json", question, *FAST]) == 0  # fmt: skip
    assert f"episode written to {out}" in capsys.readouterr().err
    records = [json.loads(x) for x in (out / "episodes.jsonl").read_text().splitlines()]
    assert [r["index"] for r in records] == [0, 1]
    first = records[0]
    assert first["schema_version"] == 1 and first["step"] == 0
    assert first["question"] == "What colour is the shape?" and first["ground_truth"] is None
    assert first["reward"] is None and first["advantage"] is None
    assert first["k"] == 4 and len(first["overview"]["frames"]) == 4
    assert all((out / f["image"]).is_file() for f in first["overview"]["frames"])
    assert 1 <= len(first["turns"]) <= 3 and isinstance(first["format_ok"], bool)
    for call in (c for t in first["turns"] for c in t["calls"]):
        assert call["status"] in ("ok", "invalid", "not_executed", "tool_error")
    episodes = pytest.importorskip("paravt.train.cli", reason="paravt-train shows the folder")
    assert episodes.main(["episodes", str(out), "--html", str(out / "view.html")]) == 0
    page = (out / "view.html").read_text()
    data = page.split('id="episode-data">', 1)[1].split("</script>", 1)[0]
    assert '"reward": null' in data and "What colour is the shape?" in data


def test_ask_on_a_missing_video_reports_the_error_and_fails(tiny_model, tmp_path, capsys):
    code = main(
        [
            "ask",
            "--model",
            str(tiny_model),
            "--video",
            str(tmp_path / "nope.mp4"),
            "--json",
            "q?",
            *FAST,
        ]
    )
    assert code == 1
    captured = capsys.readouterr()
    trace = json.loads(captured.out)
    assert "nope.mp4" in trace["error"] and "does not exist" in trace["error"]
    # with --json the protocol line goes first to stderr, and into the JSON
    line = f"protocol: paper v3 (no recorded protocol in {tiny_model}); prompt mode agentic_general"
    assert captured.err.splitlines()[0].startswith(line)
    assert trace["protocol"] == captured.err.splitlines()[0]


def test_ask_states_a_recorded_or_asked_for_protocol_first(tiny_model, tmp_path, capsys):
    from paravt.core import PARAVT_PROTOCOL

    missing = ["--video", str(tmp_path / "nope.mp4"), "q?", *FAST]
    main(["ask", "--model", str(tiny_model), "--protocol", "paravt", *missing])
    assert capsys.readouterr().out.splitlines()[0] == (
        "protocol: paravt v1 (--protocol paravt); prompt mode agentic_general"
    )
    ours = tmp_path / "ours"
    ours.mkdir()
    for f in tiny_model.iterdir():  # our checkpoint: the tiny model plus its recorded protocol
        (ours / f.name).symlink_to(f)
    PARAVT_PROTOCOL.save(ours)
    main(["ask", "--model", str(ours), *missing])
    assert capsys.readouterr().out.splitlines()[0] == (
        f"protocol: paravt v1 (checkpoint records it: {ours / 'agent_protocol.json'}); "
        "prompt mode agentic_general"
    )
