"""`paravt-eval`: ask one question about one video, write the offline lmms-eval tasks, reproduce tables.

paravt-eval ask --model PATH|tiny --video V "question" [--json]
paravt-eval tasks SYNTH_DIR [--out DIR] [--limit N] | paravt-eval tasks --paper
paravt-eval reproduce [--out DIR] [--paper-splits --checkpoints base=PATH|URL,...] [...]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from paravt.core import PROMPT_MODES, add_debug, run_cli, style
from paravt.eval.config import DRIVER_TIMEOUT_S
from paravt.eval.reproduce.config import TASKS


def _model_path(value: str) -> str:
    """`tiny` means the seeded tiny Qwen3-VL (built offline and cached the first time)."""
    if value == "tiny":
        # lazy: builds with transformers only when `tiny` is asked for
        from paravt.core.tiny import cached_tiny_qwen3vl

        return str(cached_tiny_qwen3vl(seed=0))
    return value


def _add_protocol_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "agent protocol (default: the checkpoint's recorded agent_protocol.json, else paper, the "
        "released driver's, for served models and released checkpoints; every flag left out "
        "keeps the protocol's value)"
    )
    g.add_argument(
        "--protocol",
        default=None,
        help="paravt, paper (the released ParaVT driver's evaluation, request for request), or a "
        "directory holding agent_protocol.json",
    )
    g.add_argument(
        "--prompt-mode",
        choices=PROMPT_MODES,
        default=None,
        help="for every question (default: the protocol's; paper: agentic_general, grounding "
        "questions agentic_minimal)",
    )
    g.add_argument("--nframes", type=int, default=None, help="overview frames (main_nframes)")
    g.add_argument(
        "--video-channel",
        choices=("images", "video_url"),
        default=None,
        help="video_url: hand the server the video file to decode (the paper's Charades channel)",
    )
    g.add_argument("--max-turns", type=int, default=None, help="tool turns at most")
    g.add_argument("--max-parallel", type=int, default=None, help="crop_video calls per turn")
    g.add_argument(
        "--dispatch",
        choices=("parallel", "sequential"),
        default="parallel",
        help="all calls of a turn at once, or one call per turn",
    )
    g.add_argument(
        "--tool-response",
        choices=("subagent", "frames"),
        default=None,
        help="a sub-agent summarises each crop, or the frames return to the main agent",
    )
    g.add_argument("--max-new-tokens", type=int, default=None, help="tokens per main turn")
    g.add_argument(
        "--max-context-tokens",
        type=int,
        default=None,
        help="main-context tokens at most, prompt included (default: the protocol's; a "
        "checkpoint trained with a context window records it)",
    )
    g.add_argument("--temperature", type=float, default=None, help="0 is greedy")
    g.add_argument(
        "--seed",
        type=int,
        default=None,
        help="sampling seed with a temperature > 0 (the same samples, batches and seed draw the "
        "same answers again)",
    )
    g.add_argument("--max-pixels", type=int, default=None, help="pixel budget per frame")
    g.add_argument(
        "--max-crop-frames", type=int, default=None, help="frames per crop (default: the tool's 16)"
    )
    g.add_argument("--device", default="cpu", help="device of a local checkpoint")
    g.add_argument(
        "--dtype",
        choices=("auto", "bfloat16", "float16", "float32"),
        default="auto",
        help="local checkpoint weights (auto: bfloat16 on CUDA, transformers' default elsewhere)",
    )


def _protocol(args: argparse.Namespace) -> dict[str, object]:
    return {
        "protocol": args.protocol,
        "dtype": args.dtype,
        "prompt_mode": args.prompt_mode,
        "video_channel": args.video_channel,
        "main_nframes": args.nframes,
        "max_turns": args.max_turns,
        "max_parallel": args.max_parallel,
        "dispatch": args.dispatch,
        "tool_response": args.tool_response,
        "max_new_tokens": args.max_new_tokens,
        "max_context_tokens": args.max_context_tokens,
        "temperature": args.temperature,
        "seed": args.seed,
        "max_pixels": args.max_pixels,
        "max_crop_frames": args.max_crop_frames,
        "device": args.device,
    }


def cmd_ask(args: argparse.Namespace) -> int:
    # lazy: loaded when this subcommand runs (`--help` stays fast)
    from paravt.eval.agent import EvalAgent, VideoQuestion
    from paravt.eval.config import parse_eval_config

    values = _protocol(args)
    if args.base_url:
        values.update(
            base_url=args.base_url,
            model=args.served_model,
            api_key=args.api_key,
            timeout_s=args.timeout_s,
        )
    else:
        values["pretrained"] = _model_path(args.model)
    config = parse_eval_config(values)
    line = config.protocol_line(flag="--protocol ")
    # the first line: stdout for a person, stderr with --json (stdout stays one JSON document)
    print(line, file=sys.stderr if args.json else sys.stdout, flush=True)
    agent = EvalAgent(config)
    sample = VideoQuestion(
        key="ask",
        video=args.video,
        question=args.question,
        options=args.option or None,
        answer_kind=args.kind or ("mcq" if args.option else "open"),
    )
    trace = agent.run([sample])[0]
    if args.trace is not None and trace.episode is not None:
        # lazy: loaded when the subcommand writes an episode (PIL thumbnails)
        from paravt.eval.episode_out import write_episode

        tool_response = agent.config_for(sample).tool_response
        write_episode(args.trace, trace, sample, tool_response=tool_response)
        print(
            f"episode written to {args.trace} (view: paravt-train episodes {args.trace} --html)",
            file=sys.stderr,
        )
    elif args.trace is not None:
        print(f"no episode written to {args.trace}: the sample did not run", file=sys.stderr)
    if args.json:
        out = {"protocol": line, **trace.to_json()}
        print(json.dumps(out, indent=2, ensure_ascii=False, default=str))
    else:
        # lazy: loaded when this subcommand runs (`--help` stays fast)
        from paravt.eval.render import render_trace

        render_trace(trace, model=config.model_name)
    return 1 if trace.error else 0


def cmd_tasks(args: argparse.Namespace) -> int:
    # lazy: loaded when this subcommand runs (`--help` stays fast)
    from paravt.eval.paper_tasks import paper_task_dir
    from paravt.eval.synth_tasks import synth_documents, write_synth_tasks

    if args.paper:
        print(paper_task_dir())
        return 0
    if not args.synth_dir:
        raise ValueError("give SYNTH_DIR (a `paravt-tools synth` directory) or --paper")

    out = write_synth_tasks(args.synth_dir, args.out, limit=args.limit)
    counts = {name: len(rows) for name, rows in synth_documents(args.synth_dir).items()}
    for name, n in counts.items():
        shown = min(n, args.limit) if args.limit else n
        print(f"{name}: {shown} documents")
    print(f"--include_path {out}")
    return 0


def cmd_reproduce(args: argparse.Namespace) -> int:
    # lazy: loaded when this subcommand runs (`--help` stays fast)
    from paravt.eval.reproduce import ReproduceConfig, run_reproduce

    fields: dict[str, object] = {
        "out": Path(args.out),
        "device": args.device,
        "paper_splits": args.paper_splits,
        "checkpoints": args.checkpoints,
    }
    for name in ("seeds", "blocks"):
        value = getattr(args, name)
        if value:
            fields[name] = tuple(
                int(x) if name == "seeds" else x.strip().upper() for x in value.split(",")
            )
    for name in ("sft_steps", "prior_steps", "rl_steps", "n_eval", "eval_samples", "task", "jobs"):
        value = getattr(args, name)
        if value is not None:
            fields[name] = value
    config = ReproduceConfig.quick(**fields) if args.quick else ReproduceConfig(**fields)  # type: ignore[arg-type]
    result = run_reproduce(config)
    print(result.markdown_path.read_text(encoding="utf-8"))
    print(
        f"wrote {result.markdown_path}, {result.json_path}"
        + (f", {result.chart_path}" if result.chart_path else "")
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="paravt-eval", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    ask = sub.add_parser("ask", help="ask one question about one video and show the episode")
    ask.add_argument("question", help="the question (for --kind grounding: the event)")
    ask.add_argument("--video", required=True, help="the video file the agent looks at")
    ask.add_argument("--model", default="tiny", help="checkpoint directory, or 'tiny'")
    ask.add_argument("--base-url", default=None, help="OpenAI-compatible server instead of --model")
    ask.add_argument("--served-model", default=None, help="model name on the server")
    ask.add_argument(
        "--timeout-s",
        type=float,
        default=DRIVER_TIMEOUT_S,
        help="one server request at most, in seconds (the released driver's OpenAI timeout); "
        "three attempts on connection errors and HTTP 5xx",
    )
    ask.add_argument(
        "--api-key",
        default=os.environ.get("OPENAI_API_KEY"),
        help="bearer token for the server (default: $OPENAI_API_KEY)",
    )
    ask.add_argument("--option", action="append", help="a multiple-choice option (repeat)")
    ask.add_argument(
        "--kind",
        choices=("mcq", "grounding", "open"),
        default=None,
        help="answer kind (default: mcq with --option, else open): picks the final-answer note "
        "and how the answer is read (grounding: the question is the event's caption)",
    )
    ask.add_argument("--json", action="store_true", help="print the trace as JSON")
    ask.add_argument(
        "--trace",
        type=Path,
        default=None,
        metavar="DIR",
        help="also append the episode to the episodes folder DIR (episodes.jsonl + thumbnails, "
        "the schema RL runs record); `paravt-train episodes DIR --html` shows it in a browser",
    )
    _add_protocol_args(ask)
    ask.set_defaults(func=cmd_ask)

    tasks = sub.add_parser("tasks", help="write the offline lmms-eval tasks for a synth directory")
    tasks.add_argument(
        "synth_dir", nargs="?", default=None, help="a directory written by `paravt-tools synth`"
    )
    tasks.add_argument(
        "--paper",
        action="store_true",
        help="print the include path of the paravt_paper task group (the paper's seven splits)",
    )
    tasks.add_argument(
        "--out", default=None, help="output directory (default: SYNTH_DIR/lmms_eval_tasks)"
    )
    tasks.add_argument("--limit", type=int, default=None, help="documents per task at most")
    tasks.set_defaults(func=cmd_tasks)

    rep = sub.add_parser(
        "reproduce",
        help="the paper's Table 2 in miniature (CPU), or Table 1 on the paper's splits",
        description="Train a tiny Qwen3-VL on the miniature task (SFT, then GRPO, PARA-GRPO and "
        "the ablation arms) for several seeds, evaluate every checkpoint on held-out videos, and "
        "write OUT/tables.md (Table 2 blocks A/B/C, mean ± sd over seeds, and a results section "
        "per paper claim), OUT/tables.json and OUT/curves.png. Finished runs and cells are "
        "reused, so an interrupted run continues (per seed and arm). The default (5 seeds, the "
        "'prior' task) took 230 min of training and measuring on a shared 2-core machine "
        "(summed over seeds; --jobs 2 runs two seeds at once, so about half that wall time, an "
        "estimate); --blocks A,C drops the block-B arms. The verdict "
        "rules were fixed before the run they judge (paravt.eval.reproduce.rules).",
    )
    rep.add_argument(
        "--out", default="runs/reproduce", help="output directory (default: %(default)s)"
    )
    rep.add_argument(
        "--seeds", default=None, help="training seeds, comma separated (default: 0,1,2,3,4)"
    )
    rep.add_argument("--blocks", default=None, help="Table 2 blocks to run (default: A,B,C)")
    rep.add_argument(
        "--task",
        choices=TASKS,
        default=None,
        help="the miniature's task variant: 'prior_kept' (default, the second pre-registration's: "
        "the paper's mechanism with the preconditions the first run lacked, made true on probes: "
        "a tool worth calling at K = 2, a prior the cold start keeps, a 1600-step cold start), "
        "'prior' (the first registration's: a competing tool prior before a short cold start, a "
        "dense budget often but not always enough, the gate over it), 'costly' (a context "
        "window that a tool call overflows at the dense K = 8 overview) or 'plain' (calls cost "
        "nothing)",
    )
    rep.add_argument(
        "--sft-steps", type=int, default=None, help="cold-start SFT steps (default: the task's)"
    )
    rep.add_argument(
        "--prior-steps",
        type=int,
        default=None,
        help="tool-prior steps before the cold start (default: the task's; 0 on costly/plain)",
    )
    rep.add_argument("--rl-steps", type=int, default=None, help="RL steps per arm (default: 40)")
    rep.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="seeds trained and measured at once, one process each (default: 1; 2 on a "
        "2-core machine halves the time)",
    )
    rep.add_argument("--n-eval", type=int, default=None, help="held-out videos (default: 64)")
    rep.add_argument(
        "--eval-samples",
        type=int,
        default=None,
        help="beside the greedy columns, episodes per held-out question sampled at the "
        "rollout temperature, seeded and paired by question (default: 4; 0: greedy only)",
    )
    rep.add_argument(
        "--quick",
        action="store_true",
        help="seconds, not minutes: 2 seeds, blocks A and C, a few steps (checks the pipeline; "
        "its numbers mean nothing)",
    )
    rep.add_argument(
        "--paper-splits",
        action="store_true",
        help="instead: Table 1 on the seven paper splits for --checkpoints, through lmms-eval "
        "(needs the datasets; local checkpoints need a GPU, served ones run over the servers)",
    )
    rep.add_argument(
        "--checkpoints",
        default=None,
        help="with --paper-splits: stage=PATH or stage=URL pairs (stages base, sft, grpo, "
        "para_grpo), e.g. base=ckpt/base,para_grpo=http://a:8000/v1|http://b:8000/v1 (a served "
        "model over several servers: 4 samples in flight on each, 1800 s per request, as the "
        "released driver)",
    )
    rep.add_argument("--device", default="cpu", help="where the miniature trains and evaluates")
    rep.set_defaults(func=cmd_reproduce)
    add_debug(parser)
    return style(parser)


def main(argv: list[str] | None = None) -> int:
    return run_cli(
        "paravt-eval", build_parser(), argv, input_errors=(ValueError, FileNotFoundError)
    )


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
