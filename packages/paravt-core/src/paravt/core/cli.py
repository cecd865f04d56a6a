"""`paravt-core`: the command line of paravt-core.

    paravt-core demo --out DIR        one agent episode on the tiny Qwen3-VL, printed and saved
    paravt-core build-tiny --out DIR  write the tiny Qwen3-VL (model, tokenizer, processor)

Both need the `hf` extra (`pip install "paravt-core[hf]"`); importing this module does not.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from paravt.core.cli_style import add_debug, run_cli, style
from paravt.core.protocol import Frame, ImagePart, Message
from paravt.core.runtime import Episode, Trajectory
from paravt.core.tiny import build_tiny_qwen3vl, cached_tiny_qwen3vl
from paravt.core.toy import StaticToolbox

DEMO_QUESTION = "What colour is the square in the middle of the video?"
DEMO_DURATION_S = 60.0
# The tiny model has random weights and never writes a tool call, so its first turn is scripted.
DEMO_FIRST_TURN = (
    "The overview is too sparse; I will look at two windows in parallel.</think>\n"
    '<tool_call>{"name": "crop_video", "arguments": {"start_time": 10, "end_time": 20, '
    '"num_frames": 2}}</tool_call>\n'
    '<tool_call>{"name": "crop_video", "arguments": {"start_time": 30, "end_time": 40, '
    '"num_frames": 2}}</tool_call>'
)


def toy_frame(timestamp_s: float, size: int = 32) -> Any:
    """A small uint8 (H, W, 3) frame: a coloured square whose colour changes over time."""
    import numpy as np

    colours = [(220, 40, 40), (40, 200, 60), (40, 80, 220), (230, 210, 40)]
    image = np.full((size, size, 3), 16, dtype=np.uint8)
    lo, hi = size // 4, size - size // 4
    image[lo:hi, lo:hi] = colours[int(timestamp_s // 15) % len(colours)]
    return image


def toy_video_toolbox(duration_s: float = DEMO_DURATION_S) -> StaticToolbox:
    """`crop_video` over a synthetic video: StaticToolbox's windows with `toy_frame` images."""
    return StaticToolbox(duration_s=duration_s, image=toy_frame)


# --------------------------------------------------------------------------------------------------
# Episode as JSON


def _media_summary(item: Any) -> dict[str, Any]:
    grid = getattr(item, "grid_thw", None)
    if grid is not None:
        return {"kind": "image", "grid_thw": [int(x) for x in grid.tolist()]}
    shape = getattr(item, "shape", None)
    return {"kind": type(item).__name__, "shape": list(shape) if shape is not None else None}


def _message_json(message: Message) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    for part in message.parts:
        if isinstance(part, ImagePart):
            shape = getattr(part.image, "shape", None)
            parts.append({"type": "image", "shape": list(shape) if shape is not None else None})
        else:
            parts.append({"type": "text", "text": part.text})
    return {"role": message.role, "content": parts}


def trajectory_to_dict(traj: Trajectory) -> dict[str, Any]:
    """A trajectory as JSON-ready data (images summarised by their shapes)."""
    return {
        "role": traj.role,
        "turn": traj.turn,
        "call_index": traj.call_index,
        "assistant_prefix": traj.assistant_prefix,
        "messages": [_message_json(m) for m in traj.messages],
        "token_ids": list(traj.token_ids),
        "loss_mask": list(traj.loss_mask),
        "logprobs": [round(float(x), 6) for x in traj.logprobs],
        "num_generated": traj.num_generated,
        "media": [_media_summary(m) for m in traj.media],
    }


def episode_to_dict(episode: Episode) -> dict[str, Any]:
    """An `Episode` as JSON-ready data: turns, calls, every trajectory."""
    return {
        "key": episode.key,
        "answer": episode.answer,
        "forced_answer": episode.forced_answer,
        "num_tool_calls": episode.num_tool_calls,
        "num_tool_errors": episode.num_tool_errors,
        "total_s": round(episode.total_s, 4),
        "turns": [t.to_dict() for t in episode.turns],
        "main": trajectory_to_dict(episode.main),
        "subagents": [trajectory_to_dict(s) for s in episode.subagents],
    }


# --------------------------------------------------------------------------------------------------
# Printing


def _plain_report(episode: Episode) -> str:
    lines = [
        f"Episode {episode.key!r}: {len(episode.turns)} turns, "
        f"{episode.num_tool_calls} tool calls executed, {episode.num_tool_errors} errors"
    ]
    for t in episode.turns:
        lines.append(f"--- main turn {t.turn} ({t.num_tokens} tokens, {t.finish_reason})")
        lines.append(t.response)
        for c in t.calls:
            status = "ran" if c.executed else "not run"
            window = f" window {c.window_s[0]:g}-{c.window_s[1]:g} s" if c.window_s else ""
            lines.append(
                f"  call {c.index} [{status}]{window} frames={c.num_frames}"
                + (f" error: {c.error}" if c.error else "")
            )
            if c.summary is not None:
                lines.append(f"    sub-agent summary: {c.summary!r}")
    main = episode.main
    lines.append(
        f"main trajectory: {len(main.token_ids)} tokens, {main.num_generated} generated, "
        f"{len(main.media)} images; sub-agents: {len(episode.subagents)}"
    )
    lines.append(f"answer: {episode.answer!r}")
    return "\n".join(lines)


def print_episode(episode: Episode) -> None:
    """Print an episode readably: with rich when it is installed, plain text otherwise."""
    try:
        from rich.console import Console
        from rich.panel import Panel
        from rich.table import Table
    except ImportError:
        print(_plain_report(episode))
        return
    console = Console()
    console.rule(f"Episode {episode.key}")
    for t in episode.turns:
        console.print(
            Panel(
                t.response,
                title=f"main turn {t.turn}",
                subtitle=f"{t.num_tokens} tokens, {t.finish_reason}",
                expand=False,
            ),
            markup=False,
        )
        if t.calls:
            table = Table("call", "status", "window (s)", "frames", "error / sub-agent summary")
            for c in t.calls:
                window = f"{c.window_s[0]:g}-{c.window_s[1]:g}" if c.window_s else "-"
                table.add_row(
                    str(c.index),
                    "ran" if c.executed else "not run",
                    window,
                    str(c.num_frames),
                    c.error or repr(c.summary),
                )
            console.print(table)
    main = episode.main
    console.print(
        f"main trajectory: {len(main.token_ids)} tokens, {main.num_generated} generated "
        f"(loss mask), {len(main.media)} images; sub-agent trajectories: {len(episode.subagents)}",
        markup=False,
    )
    console.print(f"answer: {episode.answer!r}", markup=False)


# --------------------------------------------------------------------------------------------------
# Commands


def run_demo(
    out: Path,
    *,
    seed: int = 0,
    cache_dir: Path | None = None,
    dispatch: str = "parallel",
    tool_response: str = "subagent",
    max_new_tokens: int = 24,
    temperature: float = 0.7,
) -> Episode:
    """Build (or reuse) the tiny model, run one two-turn episode, write `out/episode.json`."""
    # lazy: the demo needs the optional extra paravt-core[hf] (torch, transformers)
    from paravt.core.engines.hf import HFEngine
    from paravt.core.engines.scripted import ScriptedTurns
    from paravt.core.prompts import build_main_prompt
    from paravt.core.runtime import AgentConfig, AgentTask, SamplingParams, run_episodes_sync

    model_path = cached_tiny_qwen3vl(seed=seed, cache_dir=cache_dir)
    engine = ScriptedTurns(HFEngine(model_path), {1: DEMO_FIRST_TURN})
    overview = [Frame(toy_frame(t), t) for t in (5.0, 25.0, 45.0)]
    task = AgentTask(
        "demo",
        build_main_prompt(DEMO_QUESTION, overview, duration_s=DEMO_DURATION_S, max_turns=2),
        toy_video_toolbox(),
        DEMO_QUESTION,
    )
    config = AgentConfig(
        max_turns=2,
        dispatch=dispatch,
        tool_response=tool_response,
        sampling=SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature, seed=seed),
        subagent_sampling=SamplingParams(
            max_new_tokens=max_new_tokens, temperature=temperature, seed=seed + 1
        ),
    )
    (episode,) = run_episodes_sync([task], engine, config)
    out.mkdir(parents=True, exist_ok=True)
    data = {
        "model_path": str(model_path),
        "config": config.model_dump(),
        **episode_to_dict(episode),
    }
    (out / "episode.json").write_text(json.dumps(data, indent=2) + "\n")
    return episode


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="paravt-core",
        description="ParaVT core: the agent protocol and runtime. These commands need the hf "
        'extra: pip install "paravt-core[hf]".',
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = sub.add_parser(
        "demo",
        help="run one agent episode on the tiny random Qwen3-VL and save it",
        description="Build (or reuse from the cache) the tiny random-weight Qwen3-VL, run one "
        "two-turn agent episode over a synthetic video (the first main turn is scripted to call "
        "crop_video twice; everything after it is generated by the model), print it and write "
        "OUT/episode.json.",
    )
    demo.add_argument("--out", type=Path, required=True, help="directory for episode.json")
    demo.add_argument("--seed", type=int, default=0, help="tiny-model and sampling seed")
    demo.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help="where tiny models are cached (default: $PARAVT_CACHE_DIR or ~/.cache/paravt)",
    )
    demo.add_argument(
        "--dispatch",
        choices=["parallel", "sequential"],
        default="parallel",
        help="all crop_video calls of a turn at once, or one call per turn",
    )
    demo.add_argument(
        "--tool-response",
        choices=["subagent", "frames"],
        default="subagent",
        help="a sub-agent summarises each crop, or the frames go back to the main agent",
    )
    demo.add_argument("--max-new-tokens", type=int, default=24, help="tokens per generation")
    demo.add_argument("--temperature", type=float, default=0.7, help="0 is greedy")
    tiny = sub.add_parser(
        "build-tiny",
        help="write the tiny random Qwen3-VL to a directory",
        description="Write a tiny random-weight Qwen3-VL (model, tokenizer, chat template, "
        "processor) that AutoProcessor / AutoModelForImageTextToText load offline.",
    )
    tiny.add_argument("--out", type=Path, required=True, help="directory to write")
    tiny.add_argument("--seed", type=int, default=0, help="seed of tokenizer and weights")
    add_debug(parser)
    return style(parser)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `paravt-core` console script; returns the exit code."""
    return run_cli(
        "paravt-core", build_parser(), argv, run=_run, input_errors=(ValueError, ImportError)
    )


HF_EXTRA = 'Install the hf extra: pip install "paravt-core[hf]"'


def _run(args: argparse.Namespace) -> int:
    try:
        if args.command == "demo":
            if args.max_new_tokens < 1:
                raise ValueError(f"--max-new-tokens must be at least 1, got {args.max_new_tokens}")
            episode = run_demo(
                args.out,
                seed=args.seed,
                cache_dir=args.cache_dir,
                dispatch=args.dispatch,
                tool_response=args.tool_response,
                max_new_tokens=args.max_new_tokens,
                temperature=args.temperature,
            )
            print_episode(episode)
            print(f"wrote {args.out / 'episode.json'}")
        elif args.command == "build-tiny":
            print(f"wrote {build_tiny_qwen3vl(args.out, seed=args.seed)}")
    except ImportError as exc:
        raise ImportError(f"{exc}. {HF_EXTRA}") from exc
    return 0


if __name__ == "__main__":
    sys.exit(main())
