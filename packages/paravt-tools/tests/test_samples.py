"""Sample clips: fetched once into a cache, validated by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from paravt.tools import probe
from paravt.tools.samples import SAMPLE_CLIPS, fetch_sample_clips


def test_sample_clips_are_real_videos_and_a_second_fetch_reuses_the_cache(
    real_clips: dict[str, Path],
) -> None:
    cache = real_clips["bikes.mp4"].parent
    again = fetch_sample_clips(cache, ["bikes.mp4"])
    assert again["bikes.mp4"] == real_clips["bikes.mp4"]
    assert set(real_clips) == set(SAMPLE_CLIPS)
    info = probe(real_clips["bikes.mp4"])
    assert (info.width, info.height) == (640, 272)


def test_an_unknown_clip_name_lists_the_choices(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"bikes\.mp4"):
        fetch_sample_clips(tmp_path, ["cats.mp4"])
