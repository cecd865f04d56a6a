"""`paravt-tools`: generate synthetic tasks, probe a video, or crop a window to PNG files."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from paravt.core import CropVideoArgs, add_debug, run_cli, style


def _synth(args: argparse.Namespace) -> int:
    # lazy: loaded when this subcommand runs (`--help` stays fast)
    from paravt.tools.synth import SynthConfig, generate

    config = SynthConfig(
        duration_s=args.duration,
        fps=args.fps,
        width=args.width,
        height=args.height,
        num_needles=args.needles,
        question_types=tuple(args.question_types.split(",")),
        sft_overview_frames=args.sft_overview_frames,
        crop_max_frames=args.crop_max_frames,
    )
    result = generate(args.out, n=args.n, config=config, seed=args.seed, workers=args.workers)
    print(
        f"wrote {len(result.videos)} videos, {result.num_rl_rows} RL rows ({result.rl_path}) and "
        f"{result.num_sft_rows} SFT rows ({result.sft_path}) in {result.seconds:.1f} s"
    )
    return 0


def _probe(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    # lazy: loaded when this subcommand runs (`--help` stays fast)
    from paravt.tools.video import probe

    print(json.dumps(asdict(probe(args.video)), indent=2))
    return 0


def _crop(args: argparse.Namespace) -> int:
    from PIL import Image

    # lazy: loaded when this subcommand runs (`--help` stays fast)
    from paravt.tools.crop import CropConfig, VideoReader

    reader = VideoReader(CropConfig(min_pixels=args.min_pixels, max_pixels=args.max_pixels))
    call = CropVideoArgs(start_time=args.start, end_time=args.end, num_frames=args.num_frames)
    (out,) = reader.crop(args.video, [call])
    if not out.ok:
        print(out.error, file=sys.stderr)
        return 1
    dest = Path(args.out)
    dest.mkdir(parents=True, exist_ok=True)
    for frame in out.frames:
        image = Image.fromarray(frame.image.permute(1, 2, 0).numpy())
        image.save(dest / f"frame_{frame.timestamp_s:09.3f}s.png")
    note = f" ({out.text})" if out.text else ""
    print(f"{len(out.frames)} frames of {out.window_s} written to {dest}{note}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="paravt-tools", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser("synth", help="write synthetic needle videos + RL/SFT parquet")
    s.add_argument("--out", required=True, help="output directory")
    s.add_argument("--n", type=int, default=50, help="number of videos")
    s.add_argument("--duration", type=float, default=120.0, help="seconds per video")
    s.add_argument("--seed", type=int, default=0, help="seed of videos and questions")
    s.add_argument("--fps", type=float, default=4.0, help="frames per second of the videos")
    s.add_argument("--width", type=int, default=128, help="frame width in pixels")
    s.add_argument("--height", type=int, default=96, help="frame height in pixels")
    s.add_argument("--needles", type=int, default=3, help="coloured squares per video (1 target)")
    s.add_argument("--question-types", default="mcq,oe,tvg", help="comma list of mcq, oe, tvg")
    s.add_argument(
        "--sft-overview-frames", type=int, default=32, help="overview frames of the SFT rows"
    )
    s.add_argument(
        "--crop-max-frames",
        type=int,
        default=4,
        help="frames per teacher crop at most (match the trainer's video.max_crop_frames)",
    )
    s.add_argument("--workers", type=int, default=None, help="encoding processes (default: 2)")
    s.set_defaults(func=_synth)

    p = sub.add_parser("probe", help="print a video's duration, fps, frames, size and codec")
    p.add_argument("video", help="the video file")
    p.set_defaults(func=_probe)

    c = sub.add_parser("crop", help="crop a window of a video to PNG files (what the model sees)")
    c.add_argument("video", help="the video file")
    c.add_argument("--start", type=float, required=True, help="window start, seconds")
    c.add_argument("--end", type=float, required=True, help="window end, seconds")
    c.add_argument(
        "--num-frames", type=int, default=None, help="frames to take (default: the tool's rule)"
    )
    c.add_argument("--min-pixels", type=int, default=784, help="pixel budget per frame, at least")
    c.add_argument("--max-pixels", type=int, default=50176, help="pixel budget per frame, at most")
    c.add_argument("--out", required=True, help="directory for the PNG files")
    c.set_defaults(func=_crop)
    add_debug(parser)
    return style(parser)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `paravt-tools` console script."""
    from pydantic import ValidationError

    # lazy: loaded when this subcommand runs (`--help` stays fast)
    from paravt.tools.video import VideoError

    return run_cli(
        "paravt-tools",
        build_parser(),
        argv,
        input_errors=(VideoError, ValidationError, ValueError),
    )


if __name__ == "__main__":
    raise SystemExit(main())
