"""Synthetic long-video tasks where the tool is needed when the overview is sparse.

Each video is a slowly changing, low-saturation background with one easy-to-see **cue** (a
checkerboard for a few seconds) followed shortly by the **needle**: a large coloured square shown for
about 2 s. Distractor squares of other colours appear elsewhere. Questions:

- `mcq`: "What colour is the shape that appears shortly after the checkerboard?" with the four
  colours as options in a fixed order (A. red, B. green, C. blue, D. yellow); answer: a letter.
- `oe`: the same question answered with the colour word.
- `tvg`: "When does the shape that follows the checkerboard appear?"; answer `[start, end]` seconds.

A tiny model learns colour words and a fixed option order quickly, not per-sample shuffled letters
(ENVIRONMENT.md), and a short crop shows the needle while a sparse overview usually misses it.

`layout="single"` is the family built for learning on a CPU: one coloured square and nothing
else, asked as "What colour is the square?". At a small overview K the overview usually misses the
square; at K >= duration / needle_s it always shows it. The teacher crops the whole video in
`crop_windows` equal windows in parallel, each window's crop (`crop_max_frames` frames) always
catches the square when `needle_s` >= the crop's frame spacing, and the sub-agents answer in a few
words ("red square" / "no square"). `tool_fraction` < 1 makes some main-agent teacher traces
answer from the overview alone (right when the overview shows the square, a seeded guess
otherwise), so a short SFT gives a policy that calls the tool on only some prompts: the setting in
which RL has something to learn (the tool is what makes the answer findable).

Videos are rendered and encoded in chunks (`torchcodec.encoders.Encoder`), so a 30-minute video
never holds all its frames in memory. Everything is deterministic given the seed.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass

from paravt.tools.synth_traces import (
    Grid,
    answer_for,
    candidate_windows,
    describe_window,
    equal_windows,
    question_for,
    rl_rows,
    sft_conversation,
    sft_rows,
)
from paravt.tools.synth_video import (
    COLOURS,
    DATA_SOURCE,
    MCQ_QUESTION,
    OE_QUESTION,
    OPTIONS,
    RL_FILE,
    SFT_FILE,
    SINGLE_MCQ_QUESTION,
    SINGLE_OE_QUESTION,
    SINGLE_TVG_QUESTION,
    TVG_QUESTION,
    VIDEO_DIR,
    Event,
    Layout,
    QuestionType,
    SynthConfig,
    VideoSpec,
    plan_video,
    render_frames,
    spec_dict,
    write_video,
)

# the family's modules: the videos (synth_video) and the traces (synth_traces), re-exported here
__all__ = [
    "COLOURS",
    "DATA_SOURCE",
    "MCQ_QUESTION",
    "OE_QUESTION",
    "OPTIONS",
    "RL_FILE",
    "SFT_FILE",
    "SINGLE_MCQ_QUESTION",
    "SINGLE_OE_QUESTION",
    "SINGLE_TVG_QUESTION",
    "TVG_QUESTION",
    "VIDEO_DIR",
    "Event",
    "Grid",
    "Layout",
    "QuestionType",
    "SynthConfig",
    "SynthResult",
    "VideoSpec",
    "answer_for",
    "candidate_windows",
    "describe_window",
    "equal_windows",
    "generate",
    "iter_specs",
    "plan_video",
    "question_for",
    "render_frames",
    "rl_rows",
    "sft_conversation",
    "sft_rows",
    "spec_dict",
    "write_video",
]

# --------------------------------------------------------------------------------------------------
# Generation


@dataclass
class SynthResult:
    out_dir: Path
    videos: list[Path]
    rl_path: Path
    sft_path: Path
    num_rl_rows: int
    num_sft_rows: int
    seconds: float
    config: dict[str, Any] = field(default_factory=dict)


def _make_one(
    args: tuple[SynthConfig, int, int, str],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str]:
    config, seed, index, out_dir = args
    spec = plan_video(config, seed, index)
    rel = f"{VIDEO_DIR}/{spec.video_id}.mp4"
    write_video(spec, Path(out_dir) / rel, chunk_frames=config.chunk_frames, crf=config.crf)
    return rl_rows(spec, rel, config, seed), sft_rows(spec, rel, config, seed), rel


def iter_specs(config: SynthConfig, n: int, seed: int) -> Iterator[VideoSpec]:
    for i in range(n):
        yield plan_video(config, seed, i)


def generate(
    out_dir: str | os.PathLike[str],
    *,
    n: int,
    config: SynthConfig | None = None,
    seed: int = 0,
    workers: int | None = None,
    progress: bool = True,
) -> SynthResult:
    """Write `n` videos to `out_dir/videos/`, their RL rows to `out_dir/rl.parquet`, teacher traces
    to `out_dir/sft.parquet`, and `out_dir/manifest.json`. Video paths in rows are relative to
    `out_dir`. `workers` processes encode in parallel (default: up to 2)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    config = config or SynthConfig()
    out = Path(out_dir)
    (out / VIDEO_DIR).mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    jobs = [(config, seed, i, str(out)) for i in range(n)]
    workers = max(1, min(workers if workers is not None else min(2, os.cpu_count() or 1), n))
    results: list[tuple[list[dict[str, Any]], list[dict[str, Any]], str]]
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=n, desc="synth videos", unit="video")
    if workers > 1:  # import the encoder once, before forking the workers
        import torchcodec.encoders  # noqa: F401

    if workers == 1:
        results = []
        for job in jobs:
            results.append(_make_one(job))
            if bar is not None:
                bar.update()
    else:
        with ProcessPoolExecutor(workers) as pool:
            results = []
            for item in pool.map(_make_one, jobs, chunksize=max(1, n // (4 * workers))):
                results.append(item)
                if bar is not None:
                    bar.update()
    if bar is not None:
        bar.close()
    rl = [r for rows, _, _ in results for r in rows]
    sft = [r for _, rows, _ in results for r in rows]
    rl_path, sft_path = out / RL_FILE, out / SFT_FILE
    pq.write_table(pa.Table.from_pylist(rl), rl_path)
    pq.write_table(pa.Table.from_pylist(sft), sft_path)
    seconds = time.perf_counter() - t0
    manifest = {
        "generator": "paravt.tools.synth",
        "n": n,
        "seed": seed,
        "config": config.model_dump(mode="json"),
        "rl_rows": len(rl),
        "sft_rows": len(sft),
        "seconds": round(seconds, 2),
        "videos": [rel for _, _, rel in results],
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return SynthResult(
        out,
        [out / rel for _, _, rel in results],
        rl_path,
        sft_path,
        len(rl),
        len(sft),
        seconds,
        manifest,
    )
