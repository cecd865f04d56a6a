"""Reference parquet readers and sentinel-path materialisation."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from paravt.train.cli import main
from paravt.train.data import (
    ParaVTDataError,
    materialize_dir,
    read_rl_rows,
    read_sft_rows,
)


def _rl_table(paths: list[str], extra: list[object] | None = None) -> pa.Table:
    prompts = [
        [{"role": "user", "content": f"<video>\nWhat colour is shape {i}?"}]
        for i in range(len(paths))
    ]
    infos = extra or [
        json.dumps({"answer": "red", "question_type": "oe"}) for _ in range(len(paths))
    ]
    return pa.table(
        {
            "prompt": prompts,
            "videos": [[{"video": p}] for p in paths],
            "extra_info": infos,
        }
    )


def _touch(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x00")


def test_rl_rows_with_missing_videos_are_skipped_and_counted_per_source(tmp_path: Path) -> None:
    root = tmp_path / "src"
    _touch(root / "selfqa/a.mp4")
    _touch(root / "museg/charades/b.mp4")
    paths = ["selfqa/a.mp4", "museg/charades/b.mp4", "selfqa/gone.mp4", "longvt_source/x/y.mp4"]
    pq.write_table(_rl_table(paths), tmp_path / "rl.parquet")
    examples, report = read_rl_rows([tmp_path / "rl.parquet"], root=root)
    assert [e.video.name for e in examples] == ["a.mp4", "b.mp4"]
    assert report.kept == 2 and report.skipped == 2
    assert report.missing_by_source == {"selfqa": 1, "longvt_source": 1}
    first = examples[0]
    assert first.answer == "red" and first.question_type == "oe"
    assert first.question == "What colour is shape 0?"


def test_relative_non_sentinel_videos_resolve_next_to_the_parquet_file(tmp_path: Path) -> None:
    _touch(tmp_path / "videos/v0.mp4")
    pq.write_table(_rl_table(["videos/v0.mp4"]), tmp_path / "rl.parquet")
    examples, _ = read_rl_rows([tmp_path])
    assert examples[0].video == (tmp_path / "videos/v0.mp4").resolve()


def test_a_schema_problem_names_file_row_and_column(tmp_path: Path) -> None:
    _touch(tmp_path / "v.mp4")
    table = _rl_table(["v.mp4", "v.mp4"], extra=[json.dumps({"answer": "A"}), "{not json"])
    pq.write_table(table, tmp_path / "bad.parquet")
    with pytest.raises(ParaVTDataError, match=r"bad\.parquet row 1 column 'extra_info'"):
        read_rl_rows([tmp_path / "bad.parquet"])


def test_a_table_read_row_without_an_answer_is_refused_not_graded_as_none(tmp_path: Path) -> None:
    # extra_info as a struct column (a Hugging Face dataset's shape): a row without an answer
    # reads back {"answer": None, ...}, which must not become the answer "None"
    _touch(tmp_path / "v.mp4")
    infos = [{"answer": "red", "question_type": "oe"}, {"answer": None, "question_type": "oe"}]
    pq.write_table(_rl_table(["v.mp4", "v.mp4"], extra=infos), tmp_path / "rl.parquet")
    with pytest.raises(ParaVTDataError, match=r"rl\.parquet row 1 column 'extra_info'.*non-null"):
        read_rl_rows([tmp_path / "rl.parquet"])
    pq.write_table(_rl_table(["v.mp4"], extra=infos[:1]), tmp_path / "rl.parquet")
    (example,), _ = read_rl_rows([tmp_path / "rl.parquet"])
    assert example.answer == "red"


def test_a_missing_column_is_named_with_the_columns_present(tmp_path: Path) -> None:
    pq.write_table(pa.table({"prompt": ["x"]}), tmp_path / "p.parquet")
    with pytest.raises(ParaVTDataError, match="has no 'videos', 'extra_info' column"):
        read_rl_rows([tmp_path / "p.parquet"])


def test_a_missing_parquet_path_says_how_to_make_it(tmp_path: Path) -> None:
    with pytest.raises(ParaVTDataError, match="paravt-tools"):
        read_rl_rows([tmp_path / "nope.parquet"])


def test_sft_rows_resolve_video_parts_and_require_an_assistant_turn(tmp_path: Path) -> None:
    _touch(tmp_path / "selfqa/v.mp4")
    good = [
        {
            "role": "user",
            "content": [
                {"type": "video_url", "video_url": {"url": "selfqa/v.mp4"}},
                {"type": "text", "text": "What happens?"},
            ],
        },
        {"role": "assistant", "content": "<think>look</think><answer>x</answer>"},
    ]
    missing = [
        {"role": "user", "content": [{"type": "video_url", "video_url": {"url": "selfqa/w.mp4"}}]},
        {"role": "assistant", "content": "a"},
    ]
    table = pa.table({"messages": [json.dumps(good), json.dumps(missing)]})
    pq.write_table(table, tmp_path / "sft.parquet")
    examples, report = read_sft_rows([tmp_path / "sft.parquet"], root=tmp_path)
    assert len(examples) == 1 and examples[0].videos == [(tmp_path / "selfqa/v.mp4").resolve()]
    assert report.missing_by_source == {"selfqa": 1}
    no_assistant = pa.table({"messages": [json.dumps(good[:1])]})
    pq.write_table(no_assistant, tmp_path / "na.parquet")
    with pytest.raises(ParaVTDataError, match=r"na\.parquet row 0 column 'messages': no assistant"):
        read_sft_rows([tmp_path / "na.parquet"], root=tmp_path)


def test_materialize_rewrites_sentinels_to_file_urls_and_reports_missing(tmp_path: Path) -> None:
    root, src, out = tmp_path / "root", tmp_path / "in", tmp_path / "out"
    _touch(root / "selfqa/a.mp4")
    src.mkdir()
    pq.write_table(
        _rl_table(["selfqa/a.mp4", "museg/charades/z.mp4", "/abs/elsewhere.mp4"]),
        src / "paravt_rl.parquet",
    )
    sft = [
        {"role": "user", "content": [{"type": "video_url", "video_url": {"url": "selfqa/a.mp4"}}]}
    ]
    pq.write_table(pa.table({"messages": [json.dumps(sft)]}), src / "paravt_sft.parquet")
    report = materialize_dir(root, src, out)
    assert report == {"paravt_rl.parquet": {"museg": 1}, "paravt_sft.parquet": {}}
    videos = pq.read_table(out / "paravt_rl.parquet").column("videos").to_pylist()
    assert videos[0][0]["video"] == "file://" + str((root / "selfqa/a.mp4").resolve())
    assert videos[2][0]["video"] == "/abs/elsewhere.mp4"  # not a sentinel: untouched
    msgs = json.loads(pq.read_table(out / "paravt_sft.parquet").column("messages")[0].as_py())
    assert msgs[0]["content"][0]["video_url"]["url"].startswith("file://" + str(root.resolve()))
    assert json.loads((out / "materialize_report.json").read_text()) == report
    # The materialised file reads back with every present video found, no root needed.
    examples, rep = read_rl_rows([out / "paravt_rl.parquet"])
    assert len(examples) == 1 and rep.missing_by_source == {"museg": 1, "local": 1}


def test_the_materialize_command_prints_the_missing_counts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "root").mkdir()
    (tmp_path / "in").mkdir()
    pq.write_table(_rl_table(["selfqa/q.mp4"]), tmp_path / "in" / "x.parquet")
    args = ["materialize", "--root", str(tmp_path / "root"), "--parquet-dir", str(tmp_path / "in")]
    assert main([*args, "--output-dir", str(tmp_path / "out")]) == 0
    assert "x.parquet: missing files per source: {'selfqa': 1}" in capsys.readouterr().out
    assert main([*args, "--output-dir", str(tmp_path / "in")]) == 2
