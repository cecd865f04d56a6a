"""`paravt-eval ask --trace DIR`: the asked episode on disk, in the schema RL runs record
(`paravt.core.episode_records`), so `paravt-train episodes DIR --html` shows it in a browser: the
overview, each crop window and sub-agent report with thumbnails, every turn with the parser's
verdict on its calls. An asked question has no ground truth: the record's `reward` and `advantage`
are null and its `step` is 0; each ask appends one line (`index` counts them). The lmms-eval
plugin and `reproduce`'s accuracy cells write their first samples the same way."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from paravt.core.episode_files import EPISODES_FILE, IMAGES_DIR, safe_name, write_atomic
from paravt.core.episode_records import episode_record, thumbnail_jpeg
from paravt.rewards import episode_structure


def write_episode(
    root: Path,
    trace: Any,
    sample: Any,
    *,
    tool_response: str,
    ground_truth: str | None = None,
) -> dict[str, Any]:
    """Append `trace`'s episode (a `SampleTrace` that ran) to the episodes folder `root`, its
    thumbnails under `images/ask/`; returns the record (`ground_truth`: the document's answer,
    when known). A trace without an episode (the sample could not run) is a `ValueError` naming
    why."""
    episode = trace.episode
    if episode is None:
        raise ValueError(f"no episode to write: the sample did not run ({trace.error})")
    root.mkdir(parents=True, exist_ok=True)
    path = root / EPISODES_FILE
    index = len(path.read_bytes().splitlines()) if path.exists() else 0
    tag = f"{IMAGES_DIR}/ask/{index:04d}_{safe_name(str(episode.key))}"
    thumbnails: dict[str, bytes] = {}

    def image(name: str, data: Any) -> str:
        ref = f"{tag}_{name}.jpg"
        thumbnails[ref] = thumbnail_jpeg(data)
        return ref

    question = SimpleNamespace(
        question=sample.question,
        question_type=sample.answer_kind,
        answer=ground_truth,  # an asked question has none
        extra_info={"options": sample.options},
    )
    record = episode_record(
        episode,
        question,
        trace.overview_frames,
        None,
        None,
        shape=episode_structure([t.parsed for t in episode.turns]),
        step=0,
        weight_version=0,
        index=index,
        tool_response=tool_response,
        image=image,
    )
    for ref, data in thumbnails.items():
        write_atomic(root / ref, data)
    line = (json.dumps(record, ensure_ascii=False, allow_nan=False) + "\n").encode()
    with path.open("ab") as f:  # one whole line, flushed to disk
        f.write(line)
        f.flush()
        os.fsync(f.fileno())
    return record
