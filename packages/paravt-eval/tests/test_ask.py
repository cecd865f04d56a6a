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
