"""Recorded episodes for the experiment trackers (paravt.train.episode_trackers,
`MetricsLogger.log_episodes`): a W&B table and TensorBoard markdown text built from the real records
of the scripted run in `episode_fixture`, sent only when a tracker is on, never raising."""

from __future__ import annotations

import logging
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from paravt.core.episode_files import read_episodes
from paravt.train.episode_trackers import (
    EPISODE_COLUMNS,
    TURN_CHARS,
    episode_row,
    episodes_markdown,
    md_inline,
)
from paravt.train.episodes import EpisodeRecorder
from paravt.train.metrics import MetricsLogger
from paravt.train.recipe import LoggingSpec

from .episode_fixture import record_run


class FakeTable:
    def __init__(self, columns: list[str], data: list[list[Any]]) -> None:
        self.columns, self.data = columns, data


class FakeRun:
    def __init__(self, fail: bool = False) -> None:
        self.logged: list[tuple[dict[str, Any], int | None]] = []
        self.fail = fail

    def log(self, data: dict[str, Any], step: int | None = None) -> None:
        if self.fail:
            raise RuntimeError("wandb is down")
        self.logged.append((data, step))

    def finish(self) -> None:
        pass


class FakeWriter:
    def __init__(self) -> None:
        self.texts: list[tuple[str, str, int]] = []
        self.scalars: list[tuple[str, float, int]] = []

    def add_text(self, tag: str, text: str, step: int) -> None:
        self.texts.append((tag, text, step))

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        self.scalars.append((tag, value, step))

    def close(self) -> None:
        pass


RETURNED: dict[int, list[dict[str, Any]]] = {}  # step -> what EpisodeRecorder.record returned


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fixture's scripted run, 4 steps, keeping what each `record` call returned."""
    record = EpisodeRecorder.record

    def keep(self: EpisodeRecorder, step: int, ro: Any, **kw: Any) -> list[dict[str, Any]]:
        RETURNED[step] = record(self, step, ro, **kw)
        return RETURNED[step]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(EpisodeRecorder, "record", keep)
        return record_run(tmp_path_factory.mktemp("episodes"), steps=4)


@pytest.fixture
def fake_wandb(monkeypatch: pytest.MonkeyPatch) -> types.SimpleNamespace:
    """A `wandb` module whose `init` returns a `FakeRun` and whose `Table` keeps its data."""
    state = types.SimpleNamespace(runs=[], inits=0)

    def init(**kwargs: Any) -> FakeRun:
        state.inits += 1
        state.runs.append(FakeRun())
        return state.runs[-1]

    module = types.ModuleType("wandb")
    module.init = init  # type: ignore[attr-defined]
    module.Table = FakeTable  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "wandb", module)
    return state


def _records(run_dir: Path, step: int) -> list[dict[str, Any]]:
    return [r for r in read_episodes(run_dir) if r["step"] == step]


def test_record_returns_the_records_it_wrote(tmp_path: Path, run_dir: Path) -> None:
    rows = list(read_episodes(run_dir))
    assert {r["step"] for r in rows} == {1, 2, 3, 4} == set(RETURNED)
    for step in RETURNED:  # what `record` returned is what it appended, line for line
        assert RETURNED[step] == _records(run_dir, step) and RETURNED[step]
    # and [] when nothing is recorded
    off = EpisodeRecorder(tmp_path / "off", per_k=0, max_mib=1.0)
    assert off.record(1, types.SimpleNamespace(episodes=[1]), weight_version=0) == []


def test_wandb_gets_one_row_per_recorded_episode(
    run_dir: Path, tmp_path: Path, fake_wandb: types.SimpleNamespace
) -> None:
    logger = MetricsLogger(tmp_path, LoggingSpec(progress=False, wandb=True), rank=0, total=4)
    assert fake_wandb.inits == 1
    wb = fake_wandb.runs[0]
    step4 = _records(run_dir, 4)
    assert len(step4) >= 3
    logger.log_episodes(4, step4)
    assert len(wb.logged) == 1
    data, step = wb.logged[0]
    assert step == 4 and set(data) == {"episodes"}
    table = data["episodes"]
    assert table.columns == EPISODE_COLUMNS
    assert len(table.data) == len(step4)
    col = {name: i for i, name in enumerate(EPISODE_COLUMNS)}
    for row, rec in zip(table.data, step4):
        assert len(row) == len(EPISODE_COLUMNS)
        assert row[col["step"]] == 4 and row[col["weight_version"]] == 3
        assert row[col["k"]] == rec["k"] and row[col["key"]] == rec["key"]
        assert row[col["question"]] == "What colour is the square?"
        assert row[col["ground_truth"]] == rec["ground_truth"]
        assert row[col["answer"]] == (rec["answer"] or "")
        assert row[col["correct"]] == rec["reward"]["accuracy"]
        assert row[col["reward"]] == pytest.approx(rec["reward"]["total"])
        assert row[col["reward_penalty"]] == pytest.approx(rec["reward"]["penalty"])
        assert row[col["format_ok"]] is rec["format_ok"]
        assert row[col["call_attempts"]] == rec["reward"]["call_attempts"]
        assert row[col["invalid_calls"]] == rec["reward"]["invalid_calls"]
        assert row[col["tool_responses"]] == rec["reward"]["tool_responses"]
        invalid = [c for t in rec["turns"] for c in t["calls"] if c["status"] == "invalid"]
        reasons = row[col["invalid_reasons"]]
        assert reasons.count("turn ") == len(invalid)
        for c in invalid:
            assert c["reason"] in reasons
        for t in rec["turns"]:
            assert t["text"][:60] in row[col["turns"]]
            assert f"[turn {t['turn']}, finish " in row[col["turns"]]
    # the fixture's last step has invalid calls of the kinds it scripted
    all_reasons = " ".join(r[col["invalid_reasons"]] for r in table.data)
    assert "invalid_arguments" in all_reasons or "invalid_json" in all_reasons
    logger.close()


def test_rows_fit_a_real_wandb_table(run_dir: Path) -> None:
    wandb = pytest.importorskip("wandb")
    rows = [episode_row(r) for r in read_episodes(run_dir)]
    table = wandb.Table(columns=EPISODE_COLUMNS, data=rows)  # raises on mixed column types
    assert table.columns == EPISODE_COLUMNS and len(table.data) == len(rows)


def test_tensorboard_gets_escaped_markdown(run_dir: Path, tmp_path: Path) -> None:
    logger = MetricsLogger(tmp_path, LoggingSpec(progress=False), rank=0, total=4)
    logger.tb = FakeWriter()  # tensorboard itself need not be installed
    step3 = _records(run_dir, 3)
    logger.log_episodes(3, step3)
    assert len(logger.tb.texts) == 1
    tag, text, step = logger.tb.texts[0]
    assert tag == "episodes" and step == 3
    assert f"**Step 3: {len(step3)} recorded episodes**" in text
    assert "| key | K | correct | reward | format_ok | calls | invalid |" in text
    for rec in step3:
        assert f"#### {md_inline(rec['key'], 120)} (K={rec['k']}, weights v2)" in text
        for t in rec["turns"]:  # the turn's text verbatim in an indented code block
            first = t["text"].splitlines()[0][:TURN_CHARS]
            assert "    " + first in text
    assert "<tool_call>" in text  # inside code blocks, shown as written
    # outside code blocks nothing the model wrote becomes HTML or table syntax
    prose = "\n".join(line for line in text.splitlines() if not line.startswith("    "))
    assert "<tool_call>" not in prose


def test_markdown_escapes_and_cuts_long_texts() -> None:
    rec = {
        "step": 1,
        "weight_version": 0,
        "k": 2,
        "key": "a|b#0",
        "question": "Is <b>x</b> *bold* | [link]?",
        "ground_truth": "A",
        "answer": "x" * 5000,
        "reward": {"total": 1.0, "accuracy": 1.0, "call_attempts": 0, "invalid_calls": 0},
        "format_ok": True,
        "turns": [{"turn": 0, "text": "y" * (TURN_CHARS + 10), "finish_reason": "stop"}],
    }
    text = episodes_markdown(1, [rec])
    assert r"Is &lt;b&gt;x&lt;/b&gt; \*bold\* \| \[link\]?" in text
    assert "| a\\|b#0 | 2 | 1 | 1 | yes | 0 | 0 |" in text
    assert "… (+4700 chars)" in text and "x" * 301 not in text
    assert "    " + "y" * TURN_CHARS + "… (+10 chars)" in text
    row = episode_row(rec)
    assert row[EPISODE_COLUMNS.index("answer")].endswith("… (+4700 chars)")
    assert row[EPISODE_COLUMNS.index("reward_format")] is None  # missing part: None, not NaN


def test_nothing_is_sent_when_the_trackers_or_episodes_are_off(
    run_dir: Path, tmp_path: Path, fake_wandb: types.SimpleNamespace
) -> None:
    records = _records(run_dir, 1)
    assert records
    # both trackers off (the default): wandb is never initialised, nothing is logged
    off = MetricsLogger(tmp_path / "a", LoggingSpec(progress=False), rank=0, total=1)
    assert off.tb is None and off.wandb is None
    off.log_episodes(1, records)
    assert fake_wandb.inits == 0
    # trackers on but episodes off (episodes_per_k 0), or not rank 0: nothing goes there
    spec = LoggingSpec(progress=False, wandb=True, episodes_per_k=0)
    no_eps = MetricsLogger(tmp_path / "b", spec, rank=0, total=1)
    no_eps.tb = FakeWriter()
    no_eps.log_episodes(1, records)
    assert fake_wandb.runs[0].logged == [] and no_eps.tb.texts == []
    other = MetricsLogger(tmp_path / "c", LoggingSpec(wandb=True), rank=1, total=1)
    other.log_episodes(1, records)
    assert fake_wandb.inits == 1  # rank 1 never initialised W&B
    # and an empty step sends nothing
    on = MetricsLogger(tmp_path / "d", LoggingSpec(progress=False, wandb=True), rank=0, total=1)
    on.log_episodes(1, [])
    assert fake_wandb.runs[1].logged == []


def test_a_failing_tracker_warns_once_and_training_goes_on(
    run_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    logger = MetricsLogger(tmp_path, LoggingSpec(progress=False), rank=0, total=4)
    logger.wandb = FakeRun(fail=True)
    logger.tb = FakeWriter()
    with caplog.at_level(logging.WARNING, logger="paravt.train"):
        for step in (1, 2):
            logger.log_episodes(step, _records(run_dir, step))  # does not raise
    warnings = [r.getMessage() for r in caplog.records if "episodes" in r.getMessage()]
    assert len(warnings) == 1 and "wandb" in warnings[0] and "wandb is down" in warnings[0]
    assert [s for _, _, s in logger.tb.texts] == [1, 2]  # TensorBoard still gets them
    # the metrics themselves are unaffected
    logger.wandb = None
    logger.log(2, {"reward/total": 1.0})
    assert ("reward/total", 1.0, 2) in logger.tb.scalars
