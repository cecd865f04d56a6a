"""`paravt-train episodes`: the per-step summary and the viewer of a recorded run that learnt
invalid calls (tests/episode_fixture.py)."""

from __future__ import annotations

import itertools
import json
import re
import shutil
from pathlib import Path

import pytest

from paravt.core.episode_files import read_episodes
from paravt.train.cli import main
from paravt.train.episode_report import summarize, trend_text, write_html

from .episode_fixture import record_run

EMPTY_WINDOW = "invalid_arguments: crop_video: end_time (8 s) must be greater than start_time (8 s)"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return record_run(tmp_path_factory.mktemp("invalid-run"))


def test_the_summary_shows_the_rising_invalid_share_and_the_parsers_reasons(run: Path) -> None:
    summary = summarize(read_episodes(run))
    shares = [r["invalid_share"] for r in summary["steps"]]
    assert [r["step"] for r in summary["steps"]] == [1, 2, 3, 4, 5, 6]
    assert shares[0] == 0.0 and shares[-1] >= 0.5
    assert all(b >= a for a, b in itertools.pairwise(shares))
    reasons = {r["reason"]: r["count"] for r in summary["top_invalid_reasons"]}
    assert EMPTY_WINDOW in reasons and max(reasons.values()) == reasons[EMPTY_WINDOW]
    assert any(r.startswith("invalid_json: tool call is not valid JSON") for r in reasons)
    last = summary["steps"][-1]
    assert set(last["invalid_by_reason"]) <= {"invalid_arguments", "invalid_json", "unknown_tool"}
    assert last["format_ok"] < summary["steps"][0]["format_ok"]
    for key in ("tool_responses", "crops_per_turn", "answer_rate", "accuracy", "f_tau"):
        assert 0 <= last[key] <= 2, key
    assert set(last["kappa_per_k"]) == {"2", "4"}
    assert summary["trend"]["warning"]
    # the fixture's reward is the released one: episodes whose every call was invalid were paid
    assert summary["trend"]["all_invalid_tool_reward"] > 0
    assert "(the reward did not rise with it)" in trend_text(summary["trend"])
    rose = {**summary["trend"], "reward_last": summary["trend"]["reward_first"] + 0.5}
    assert "it is being paid for invalid calls" in trend_text(rose)
    # the same rise where such episodes earned nothing (evidence credit): no claim of payment
    unpaid = {**rose, "all_invalid_tool_reward": 0.0}
    assert "earned no tool reward here" in trend_text(unpaid)
    assert "paid for invalid calls" not in trend_text(unpaid)


def test_the_command_prints_the_table_and_json_and_writes_the_viewer(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    html = tmp_path / "view" / "episodes.html"
    assert main(["episodes", str(run), "--html", str(html)]) == 0
    out = capsys.readouterr().out
    assert "invalid by parser error" in out and "invalid_arguments" in out
    assert EMPTY_WINDOW in out and "INVALID CALLS RISING" in out
    assert re.search(r"│\s+6 │.*75%", out)
    assert html.is_file()
    page = html.read_text()
    # images relative to the page, the data embedded (no fetch: opens from the file system)
    assert "../../" in page or "episodes/images" in page
    assert 'id="episode-data"' in page and "fetch(" not in page

    assert main(["episodes", str(run), "--json", "--no-html"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["episodes"] == 36 and data["steps"][-1]["invalid_share"] >= 0.5


def test_a_missing_run_is_an_input_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["episodes", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "episodes/episodes.jsonl" in err and "logging.episodes_per_k" in err


def test_the_viewer_escapes_model_text(run: Path, tmp_path: Path) -> None:
    # a model can write anything, </script> included: it must stay data
    path = run / "episodes" / "episodes.jsonl"
    rows = list(read_episodes(run))
    rows[0]["turns"][0]["text"] = "</script><script>alert(1)</script>"
    evil = tmp_path / "evil"
    (evil / "episodes").mkdir(parents=True)
    (evil / "episodes" / "episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    page = write_html(evil).read_text()
    assert "<script>alert(1)" not in page
    assert path.is_file()


def test_unscored_episodes_read_as_unknown_not_as_zero(run: Path, tmp_path: Path) -> None:
    """Evaluation episodes carry no reward (null): their accuracy and reward are unknown, shown
    as '-', never as 0.00; tool responses come from the calls themselves."""
    scored = list(read_episodes(run))
    unscored = [{**e, "reward": None, "advantage": None} for e in scored]
    a, b = summarize(scored)["steps"][0], summarize(unscored)["steps"][0]
    assert b["tool_responses"] == a["tool_responses"]
    assert b["accuracy"] != b["accuracy"] and b["reward"] != b["reward"]  # NaN: unknown
    copy = tmp_path / "unscored"
    shutil.copytree(run, copy)
    jsonl = next(copy.rglob("episodes.jsonl"))
    jsonl.write_text("".join(json.dumps(e) + "\n" for e in unscored))
    page = write_html(copy, tmp_path / "view.html")
    row = page.read_text().split("<tbody>", 1)[1].split("</tr>", 1)[0]
    assert row.count("<td>-</td>") >= 3  # accuracy, f_tau, reward
