"""SFT straight from the parquet rows `paravt-tools synth` writes: frames decoded by paravt-tools
where the rows' `<video>` placeholders stand, tokenised through the model's template, trained."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from paravt.core.protocol import ImagePart, TextPart
from paravt.train.data import read_sft_rows
from paravt.train.frames import FrameSource
from paravt.train.recipe import VideoSpec, load_recipe
from paravt.train.sft import encode_conversation, train_sft

VIDEO = ["video.overview_frames=4", "video.max_crop_frames=2", "video.max_pixels=4096"]


@pytest.fixture(scope="module")
def synth_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from paravt.tools.synth import SynthConfig, generate

    out = tmp_path_factory.mktemp("synth")
    config = SynthConfig(
        duration_s=20.0, question_types=("oe",), sft_overview_frames=4, crop_max_frames=2
    )
    generate(out, n=1, config=config, seed=3, workers=1, progress=False)
    return out


def _timestamps(parts: list[object]) -> list[str]:
    return [
        m.group(1)
        for p in parts
        if isinstance(p, TextPart) and (m := re.fullmatch(r"<([\d.]+) seconds>", p.text))
    ]


def test_synth_rows_show_the_frames_their_teacher_text_describes(synth_dir: Path) -> None:
    examples, report = read_sft_rows([synth_dir / "sft.parquet"])
    assert report.skipped == 0 and len(examples) == 4  # one main trace + three sub-agent traces
    source = FrameSource(VideoSpec(overview_frames=4, max_crop_frames=2, max_pixels=4096))
    for ex in examples:
        messages = source.messages_of(ex)
        user = next(m for m in messages if m.role == "user")
        assert isinstance(user.content, list)
        images = [p for p in user.content if isinstance(p, ImagePart)]
        stamps = _timestamps(user.content)
        assert len(images) == len(stamps) == ex.frames["num_frames"]
        assert not any("<video>" in p.text for p in user.content if isinstance(p, TextPart))
        # Every time the teacher says it saw something at is a frame the model is shown.
        first = next(m.text for m in messages if m.role == "assistant")
        if first.startswith("<answer>"):  # a sub-agent trace describes its crop's frames
            said = first
        elif match := re.search(r"in the overview at (.+? s)\. ", first):
            said = match.group(1)  # a main trace names the overview frames showing the cue
            assert said
        else:
            assert "not in the overview" in first
            continue
        times = re.findall(r"(\d+\.\d) s\b", said)
        assert set(times) <= set(stamps), (said, stamps)


def test_sft_tokenises_and_trains_on_synth_parquet_rows(
    synth_dir: Path, tiny_model_path: Path, tmp_path: Path
) -> None:
    from paravt.core.engines.hf import HFEngine

    recipe = load_recipe(
        "tiny_sft",
        [
            f"model.path={tiny_model_path}",
            "model.build_tiny=false",
            f"output_dir={tmp_path / 'run'}",
            f"data.parquet=[{synth_dir / 'sft.parquet'}]",
            "data.synth=null",
            *VIDEO,
            "max_steps=3",
            "sft.batch_size=2",
            "optim.warmup_steps=1",
            "logging.progress=false",
        ],
    )
    engine = HFEngine(tiny_model_path)
    examples, _ = read_sft_rows([synth_dir / "sft.parquet"])
    source = FrameSource(recipe.video)
    seqs = [encode_conversation(engine, source.messages_of(ex)) for ex in examples]
    for ex, seq in zip(examples, seqs):
        assert len(seq.media) == ex.frames["num_frames"]  # one processed image per frame
        assert seq.token_ids.count(engine.image_token_id) >= len(seq.media)
        supervised = engine.tokenizer.decode([t for t, m in zip(seq.token_ids, seq.mask) if m])
        assert "<answer>" in supervised and "seconds>" not in supervised
    main = seqs[0]
    assert "<tool_call>" in engine.tokenizer.decode(
        [t for t, m in zip(main.token_ids, main.mask) if m]
    )

    train_sft(recipe)
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all(math.isfinite(r["loss"]) and r["tokens/supervised"] > 0 for r in rows)
    assert rows[0]["grad_norm"] > 0
    assert (tmp_path / "run" / "final" / "config.json").is_file()


def test_a_crop_longer_than_the_recipe_allows_is_named_in_a_warning(
    synth_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    examples, _ = read_sft_rows([synth_dir / "sft.parquet"])
    source = FrameSource(VideoSpec(overview_frames=4, max_crop_frames=1, max_pixels=4096))
    with caplog.at_level("WARNING", logger="paravt.train"):
        for ex in examples:
            source.messages_of(ex)
    warnings = [r.getMessage() for r in caplog.records if "max_crop_frames" in r.getMessage()]
    assert len(warnings) == 1 and "crop shows 2 frames" in warnings[0]


def test_a_video_window_read_from_a_table_is_cropped_whichever_names_it_uses(
    synth_dir: Path, tmp_path: Path
) -> None:
    # Two rows naming their windows differently (video_start/... and start_time/...): a table's
    # struct column gives every part every field, so the second row's part also reads
    # video_start=None; its window must still be the one it names, not the whole video.
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq

    shutil.copy(next((synth_dir / "videos").glob("*.mp4")), tmp_path / "v.mp4")

    def row(part: dict[str, object]) -> list[dict[str, object]]:
        return [
            {"role": "user", "content": [part, {"type": "text", "text": "What is shown?"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "<answer>red</answer>"}]},
        ]

    rows = [
        row(
            {"type": "video", "video": "v.mp4", "video_start": 2.0, "video_end": 4.0, "nframes": 2}
        ),
        row(
            {
                "type": "video",
                "video": "v.mp4",
                "start_time": 12.0,
                "end_time": 14.0,
                "num_frames": 2,
            }
        ),
    ]
    table = pa.table({"messages": rows})
    assert table.to_pylist()[1]["messages"][0]["content"][0]["video_start"] is None
    pq.write_table(table, tmp_path / "sft.parquet")
    examples, _ = read_sft_rows([tmp_path / "sft.parquet"])
    source = FrameSource(VideoSpec(overview_frames=4, max_crop_frames=2, max_pixels=4096))
    windows = []
    for ex in examples:
        user = next(m for m in source.messages_of(ex) if m.role == "user")
        windows.append([float(t) for t in _timestamps(user.content)])
    assert len(windows[0]) == 2 and all(2.0 <= t <= 4.0 for t in windows[0])
    assert len(windows[1]) == 2 and all(12.0 <= t <= 14.0 for t in windows[1]), windows[1]


def test_a_synthetic_set_made_with_other_settings_is_refused_not_read(tmp_path: Path) -> None:
    """A recipe whose `data.synth` changed (its size, seed or a setting) must not train on the set
    an earlier run left in the same folder: its parquet files exist, so nothing is regenerated,
    and they would be read as the recipe's."""
    from paravt.train.examples import ensure_synth
    from paravt.train.recipe import DataSpec, SynthSpec

    out = tmp_path / "synth"

    def spec(**change: object) -> DataSpec:
        fields = {"n": 1, "seed": 3, "duration_s": 20.0, "question_types": ["oe"], **change}
        synth = SynthSpec.model_validate({"out_dir": str(out), **fields})
        return DataSpec(parquet=[str(out / "sft.parquet")], synth=synth)

    ensure_synth(spec())  # generates
    made = (out / "sft.parquet").stat().st_mtime_ns
    ensure_synth(spec())  # the same set: read as it is
    assert (out / "sft.parquet").stat().st_mtime_ns == made
    for change, named in (
        ({"n": 2}, "n=1 (the recipe: 2)"),
        ({"seed": 4}, "seed=3 (the recipe: 4)"),
        ({"duration_s": 16.0}, "duration_s=20.0 (the recipe: 16.0)"),
    ):
        with pytest.raises(ValueError, match=re.escape(named)) as err:
            ensure_synth(spec(**change))
        assert str(out) in str(err.value) and "delete that folder" in str(err.value)
    # a set made by other means (no manifest) is the user's to vouch for: read as it is
    (out / "manifest.json").unlink()
    ensure_synth(spec(n=2))
