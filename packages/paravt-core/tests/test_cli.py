"""The `paravt-core` command line: demo episode and tiny-model builder."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from paravt.core.cli import build_parser, main


def test_help_lists_the_demo_and_build_commands() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "paravt.core.cli", "--help"], capture_output=True, text=True
    )
    assert result.returncode == 0
    assert "demo" in result.stdout and "build-tiny" in result.stdout
    demo_help = build_parser().parse_args(["demo", "--out", "x"])
    assert demo_help.dispatch == "parallel" and demo_help.tool_response == "subagent"


def test_the_demo_requires_an_output_directory(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["demo"])
    assert "--out" in capsys.readouterr().err


def test_the_demo_runs_an_episode_prints_it_and_writes_episode_json(
    tiny_model_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "demo"
    code = main(
        [
            "demo",
            "--out",
            str(out),
            "--cache-dir",
            str(tiny_model_path.parent),
            "--max-new-tokens",
            "6",
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "main turn 1" in printed and "main turn 2" in printed
    data = json.loads((out / "episode.json").read_text())
    assert Path(data["model_path"]) == tiny_model_path  # the cached model, not a rebuild
    assert len(data["turns"]) == 2 and data["num_tool_calls"] == 2
    assert [c["executed"] for c in data["turns"][0]["calls"]] == [True, True]
    assert len(data["subagents"]) == 2
    main_traj = data["main"]
    assert len(main_traj["token_ids"]) == len(main_traj["loss_mask"]) == len(main_traj["logprobs"])
    assert main_traj["num_generated"] == sum(t["num_tokens"] for t in data["turns"])
    assert all(m["kind"] == "image" for m in main_traj["media"])


def test_the_demo_in_frames_mode_returns_frames_into_the_main_context(
    tiny_model_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "demo",
            "--out",
            str(tmp_path),
            "--cache-dir",
            str(tiny_model_path.parent),
            "--tool-response",
            "frames",
            "--max-new-tokens",
            "4",
            "--temperature",
            "0",
        ]
    )
    assert code == 0
    data = json.loads((tmp_path / "episode.json").read_text())
    assert data["subagents"] == []
    assert len(data["main"]["media"]) == 3 + 2 * 2  # overview + two windows of two frames


def test_a_bad_token_budget_is_reported_not_raised(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "--out", str(tmp_path), "--max-new-tokens", "0"]) == 2
    assert "--max-new-tokens" in capsys.readouterr().err
