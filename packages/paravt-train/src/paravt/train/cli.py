"""`paravt-train`: sft, rl, materialize, plot, episodes, smoke and doctor subcommands.

Heavy imports (torch, transformers) happen inside the subcommands, so `--help` is instant.
Help and errors as the other command lines (`paravt.core.cli_style`): an error ends in one line on
stderr naming the input and the fix (exit 2 for a bad recipe, override or data path, 1 otherwise);
`--debug` shows the full traceback instead.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from paravt.core import add_debug, run_cli, style
from paravt.train import doctor
from paravt.train.recipe import RECIPE_NAMES, RecipeError, load_recipe, recipe_help

_EPILOG_RECIPE = (
    "RECIPE is a YAML file or a packaged recipe name ({names}).\n"
    "Overrides are key.sub=value pairs, values parsed as YAML, e.g. optim.lr=1e-4 "
    "rollout.group_size=4.\nUnknown keys are errors. `--help-recipe` lists every key with its "
    "default and meaning."
).format(names=", ".join(RECIPE_NAMES))


def _add_train_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("recipe", nargs="?", help="recipe YAML path or packaged recipe name")
    p.add_argument("overrides", nargs="*", metavar="key.sub=value", help="recipe overrides")
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue from the last complete checkpoint in output_dir (no lost or repeated steps)",
    )
    p.add_argument(
        "--help-recipe", action="store_true", help="list every recipe key of this stage and exit"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="paravt-train",
        description="Cold-start SFT and PARA-GRPO RL for ParaVT tool-native video models. "
        "Run under torchrun for several processes (FSDP2 / DeepSpeed, chosen in the recipe).",
        epilog="Start here: `nox -s train_smoke` (tiny model, synthetic tasks, SFT then PARA-GRPO).",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser(
        "sft",
        help="supervised cold start on tool-use traces (loss on assistant tokens only)",
        description="Supervised fine-tuning on chat traces with tool calls and tool responses. "
        "Only assistant tokens are supervised; cosine schedule with warmup, gradient "
        "accumulation, optional packing and gradient checkpointing.",
        epilog=_EPILOG_RECIPE,
    )
    _add_train_args(p)

    p = sub.add_parser(
        "rl",
        help="PARA-GRPO / GRPO with agent rollouts, crop_video tools and sub-agents",
        description="Each step: a batch of prompts; nFrames gating picks the overview K per prompt; "
        "n rollouts per prompt through the ParaVT agent runtime; paravt-rewards scores them; "
        "group-normalised advantages; PPO clipped loss against the rollout log-probs plus a k3 KL "
        "penalty to a frozen reference. Metrics go to OUTPUT_DIR/metrics.jsonl.",
        epilog=_EPILOG_RECIPE,
    )
    _add_train_args(p)

    p = sub.add_parser(
        "materialize",
        help="rewrite sentinel-relative video paths of ParaVT parquet files to file:// URIs",
        description="Prefix --root to every sentinel path (longvt_source/..., museg/..., "
        "selfqa/...) in the parquet files of --parquet-dir and write them to --output-dir, "
        "reporting missing videos per source. Writes materialize_report.json there too.",
    )
    p.add_argument("--root", required=True, type=Path, help="where ParaVT-Source was extracted")
    p.add_argument("--parquet-dir", required=True, type=Path, help="directory of input *.parquet")
    p.add_argument("--output-dir", required=True, type=Path, help="directory for the output")

    p = sub.add_parser(
        "plot",
        help="draw training curves of one or more runs to a PNG",
        description="Reward, f_tau (format reward) with format ok (share of episodes that parse) "
        "and invalid tool calls per episode beside it, kappa (tool calls per rollout) and "
        "accuracy against step, from each RUN_DIR/metrics.jsonl; several runs are overlaid.",
    )
    p.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR", help="run directories")
    p.add_argument(
        "--out", type=Path, default=None, help="PNG path (default: RUN_DIR/curves.png of the first)"
    )

    p = sub.add_parser(
        "episodes",
        help="summarise a run's recorded episodes (table) and write their HTML viewer",
        description="Per step, over RUN_DIR/episodes/episodes.jsonl (the episodes an RL run "
        "records, logging.episodes_per_k per overview budget K): call attempts, invalid calls "
        "by the parser's error, tool responses, crops per turn, answer rate, accuracy, f_tau, "
        "format ok, leaked prior and reward, then the top invalid-call reasons and the invalid "
        "share's trend. Also writes a static HTML viewer (no server: open it from the file "
        "system) with sparklines, every recorded episode, filters and paging.",
    )
    p.add_argument("run", type=Path, metavar="RUN_DIR", help="run directory (or its episodes/)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON instead")
    p.add_argument(
        "--html",
        type=Path,
        default=None,
        metavar="OUT",
        help="where to write the viewer (default: RUN_DIR/episodes/index.html)",
    )
    p.add_argument("--no-html", action="store_true", help="do not write the viewer")

    p = sub.add_parser(
        "smoke",
        help="the whole pipeline on a tiny model: synth -> SFT -> PARA-GRPO -> summary",
        description="Build the tiny Qwen3-VL, generate a small synthetic task set, run tiny_sft "
        "then tiny_paragrpo, evaluate before and after RL, and write OUT/summary.md, "
        "OUT/curves.png, OUT/metrics.jsonl and OUT/final/.",
    )
    p.add_argument("--out", type=Path, default=Path("runs/smoke"), help="run directory")
    p.add_argument("--sft-steps", type=int, default=None, help="override tiny_sft max_steps")
    p.add_argument("--rl-steps", type=int, default=None, help="override tiny_paragrpo max_steps")

    doctor.add_parser(sub)
    add_debug(parser)
    return style(parser)


def _train(args: argparse.Namespace, stage: str) -> int:
    if args.help_recipe:
        print(recipe_help(stage))  # type: ignore[arg-type]
        return 0
    if not args.recipe:
        example = "tiny_sft" if stage == "sft" else "tiny_paragrpo"
        raise RecipeError(f"a RECIPE is required (e.g. {example})")
    recipe = load_recipe(args.recipe, args.overrides, stage=stage)
    if stage == "sft":
        # lazy: loaded when this subcommand runs (`--help` stays fast)
        from paravt.train.sft import train_sft

        train_sft(recipe, resume=args.resume)  # type: ignore[arg-type]
    else:
        # lazy: loaded when this subcommand runs (`--help` stays fast)
        from paravt.train.rl import train_rl

        train_rl(recipe, resume=args.resume)  # type: ignore[arg-type]
    return 0


def _episodes(args: argparse.Namespace) -> int:
    # lazy: loaded when this subcommand runs (`--help` stays fast)
    from paravt.core.episode_files import read_episodes
    from paravt.train.episode_report import (
        print_summary,
        summarize,
        summary_json,
        write_html,
    )

    summary = summarize(read_episodes(args.run))
    if args.json:
        print(summary_json(summary))
    else:
        print_summary(summary, title=str(args.run))
    if not args.no_html:
        out = write_html(args.run, args.html)
        print(f"wrote {out}", file=sys.stderr if args.json else sys.stdout)
    return 0


def _input_errors() -> tuple[type[BaseException], ...]:
    # lazy: pyarrow, loaded only when an error comes (`--help` and doctor stay fast)
    from paravt.core.episode_files import EpisodesNotFound
    from paravt.train.data import ParaVTDataError

    return (RecipeError, ParaVTDataError, EpisodesNotFound)


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand. A bad recipe, override or data path prints one line (exit 2); any other
    error one line too (exit 1) when run as a command; called with `argv` from Python, it raises.
    `--debug` raises every error with its traceback."""
    return run_cli(
        "paravt-train",
        build_parser(),
        argv,
        run=_run,
        input_errors=_input_errors,
        raise_unexpected=argv is not None,
    )


def _run(args: argparse.Namespace) -> int:
    if args.command in ("sft", "rl"):
        return _train(args, args.command)
    if args.command == "materialize":
        # lazy: loaded when this subcommand runs (`--help` stays fast)
        from paravt.train.data import materialize_dir

        report = materialize_dir(args.root, args.parquet_dir, args.output_dir)  # errors: exit 2
        for name, missing in report.items():
            status = f"missing files per source: {missing}" if missing else "all videos found"
            print(f"{name}: {status}")
        return 0
    if args.command == "plot":
        # lazy: loaded when this subcommand runs (`--help` stays fast)
        from paravt.train.plot import plot_runs

        out = plot_runs(args.runs, args.out)
        print(f"wrote {out}")
        return 0
    if args.command == "episodes":
        return _episodes(args)
    if args.command == "doctor":
        return doctor.run(args.server, args.recipe, args.overrides)  # RecipeError: above, exit 2
    if args.command == "smoke":
        # lazy: loaded when this subcommand runs (`--help` stays fast)
        from paravt.train.smoke import run_smoke

        run_smoke(args.out, sft_steps=args.sft_steps, rl_steps=args.rl_steps)
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
