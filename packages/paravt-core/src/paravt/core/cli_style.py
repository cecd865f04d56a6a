"""One way for the four command lines (`paravt-core`, `-tools`, `-train`, `-eval`) to speak.

- Help: every option has help text, and a default is shown the same way everywhere, as
  "(default: X)" at the end of the help (added by `HelpFormatter` unless the text already has a
  "(default..." of its own, for defaults that need words); descriptions keep their line breaks.
- Errors: a wrong input (the exceptions a command names as its input errors) is one line,
  `PROG COMMAND: message`, exit 2; any other error is one line with its type and a pointer to
  `--debug`, exit 1; `--debug` raises it with the full traceback. `--debug` goes before or after
  the command (`add_debug` on the top parser).

Each command line's `main(argv)` is `run_cli`: `build_parser().parse_args(argv)`, then the chosen
command under `run_command`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator, Sequence

__all__ = [
    "HelpFormatter",
    "add_debug",
    "iter_parsers",
    "one_line",
    "run_cli",
    "run_command",
    "style",
]


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps descriptions as written and ends each option's help with "(default: X)"."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        shown = (
            default is not None
            and default is not argparse.SUPPRESS
            and not isinstance(action, argparse._StoreConstAction | argparse._HelpAction)
            and action.option_strings
            and "(default" not in text
        )
        if shown:
            text = f"{text} (default: %(default)s)" if text else "(default: %(default)s)"
        return text


def iter_parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """The parser and every sub-command parser below it."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                yield from iter_parsers(sub)


def style(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Give the parser and all its sub-command parsers the shared help format."""
    for p in iter_parsers(parser):
        p.formatter_class = HelpFormatter
    return parser


def add_debug(parser: argparse.ArgumentParser) -> None:
    """`--debug` on the parser and on every sub-command parser below it, so it goes before or after
    the command (`paravt-train --debug doctor` and `paravt-train doctor --debug`). Call it once the
    sub-commands are added."""
    for p in iter_parsers(parser):
        p.add_argument(
            "--debug",
            action="store_true",
            # below the top, no default: a sub-command's would overwrite a `--debug` given before it
            default=False if p is parser else argparse.SUPPRESS,
            help="show the full traceback of an error instead of one line",
        )


def one_line(exc: BaseException) -> str:
    """The exception's message on one line (pydantic and multi-line messages joined by '; ', or by
    a space after a line that ends in ':', as in "bad keys:" followed by the keys)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = ""
    for line in lines:
        sep = "" if not text else " " if text.endswith(":") else "; "
        text += sep + line
    return text or type(exc).__name__


ErrorTypes = tuple[type[BaseException], ...]


def run_command(
    where: str,
    fn: Callable[[], int],
    *,
    input_errors: ErrorTypes | Callable[[], ErrorTypes] = (ValueError,),
    debug: bool = False,
    raise_unexpected: bool = False,
) -> int:
    """Run a command's body and turn its errors into one line on stderr (see the module doc).
    `where` names the command, e.g. "paravt-tools crop". `input_errors` may be a function that
    returns the types, called only when an error comes (for types whose module loads lazily).
    `raise_unexpected`: an error that is not an input error propagates (paravt-train's `main`
    called from Python with `argv`)."""
    try:
        return int(fn())
    except KeyboardInterrupt:
        raise
    except Exception as exc:
        if debug:
            raise
        if callable(input_errors):
            input_errors = input_errors()
        if isinstance(exc, input_errors):
            print(f"{where}: {one_line(exc)}", file=sys.stderr)
            return 2
        if raise_unexpected:
            raise
        print(
            f"{where}: {type(exc).__name__}: {one_line(exc)} "
            "(rerun with --debug for the full traceback)",
            file=sys.stderr,
        )
        return 1


def run_cli(
    prog: str,
    parser: argparse.ArgumentParser,
    argv: Sequence[str] | None,
    *,
    run: Callable[[argparse.Namespace], int] | None = None,
    input_errors: ErrorTypes | Callable[[], ErrorTypes] = (ValueError,),
    raise_unexpected: bool = False,
) -> int:
    """A command line's `main`: parse `argv`, then run the chosen command under `run_command`,
    named `PROG COMMAND` and with its `--debug`. `run` runs the command (default: the `func` that
    its sub-command parser set)."""
    args = parser.parse_args(argv)
    command = run or args.func
    return run_command(
        f"{prog} {args.command}",
        lambda: command(args),
        input_errors=input_errors,
        debug=args.debug,
        raise_unexpected=raise_unexpected,
    )
