"""The four command lines speak one way: help on every option, defaults shown alike, one-line
errors (`paravt.core.cli_style`)."""

from __future__ import annotations

import argparse
import importlib

import pytest

from paravt.core.cli_style import iter_parsers

CLIS = ["paravt.core.cli", "paravt.tools.cli", "paravt.train.cli", "paravt.eval.cli"]


def _options(parser: argparse.ArgumentParser):
    for p in iter_parsers(parser):
        for action in p._actions:
            if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
                continue
            yield p, action


@pytest.mark.parametrize("module", CLIS)
def test_every_option_and_argument_of_every_command_has_help(module: str) -> None:
    parser = importlib.import_module(module).build_parser()
    missing = [
        f"{p.prog} {'/'.join(a.option_strings) or a.dest}"
        for p, a in _options(parser)
        if not a.help  # argparse.SUPPRESS (a deliberately hidden alias) is a string: it passes
    ]
    assert not missing, f"options without help: {missing}"


@pytest.mark.parametrize("module", CLIS)
def test_defaults_are_shown_the_same_way_everywhere(module: str) -> None:
    parser = importlib.import_module(module).build_parser()
    for p, action in _options(parser):
        default = action.default
        if (
            not action.option_strings
            or default in (None, False, argparse.SUPPRESS)
            or action.help == argparse.SUPPRESS
        ):
            continue
        text = p.format_help()
        assert "(default: " in text, f"{p.prog}: no '(default: ...)' in its help"
        formatter = p._get_formatter()
        shown = formatter._get_help_string(action) or ""
        assert "(default" in shown, (
            f"{p.prog} {action.option_strings}: default {default!r} not shown as '(default: X)'"
        )


def test_an_input_error_is_one_line_and_exit_2_and_debug_raises(capsys) -> None:
    from paravt.tools.cli import main

    assert main(["synth", "--out", "/tmp/x", "--n", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("paravt-tools synth: ") and err.count("\n") == 1
    with pytest.raises(ValueError):
        main(["synth", "--out", "/tmp/x", "--n", "0", "--debug"])


def test_an_unexpected_error_names_its_type_and_points_to_debug(capsys) -> None:
    from paravt.core.cli_style import run_command

    def boom() -> int:
        raise RuntimeError("no such column\nsecond line")

    assert run_command("paravt-x y", boom) == 1
    err = capsys.readouterr().err
    assert err == (
        "paravt-x y: RuntimeError: no such column; second line "
        "(rerun with --debug for the full traceback)\n"
    )
    with pytest.raises(RuntimeError):
        run_command("paravt-x y", boom, debug=True)


# a short valid command of each command line
COMMANDS = {
    "paravt.core.cli": ["build-tiny", "--out", "x"],
    "paravt.tools.cli": ["synth", "--out", "x"],
    "paravt.train.cli": ["doctor"],
    "paravt.eval.cli": ["tasks", "--paper"],
}


@pytest.mark.parametrize("module", sorted(COMMANDS))
def test_debug_goes_before_or_after_the_command(module: str) -> None:
    parser = importlib.import_module(module).build_parser()
    command = COMMANDS[module]
    assert parser.parse_args(command).debug is False
    assert parser.parse_args(["--debug", *command]).debug is True
    assert parser.parse_args([*command, "--debug"]).debug is True


def test_a_line_ending_in_a_colon_runs_on_with_a_space() -> None:
    from paravt.core.cli_style import one_line

    assert one_line(ValueError("bad keys:\n  a\n  b")) == "bad keys: a; b"


def test_input_errors_may_be_named_late_and_unexpected_ones_may_propagate(capsys) -> None:
    from paravt.core.cli_style import run_command

    class LateError(Exception):
        pass

    def late() -> int:
        raise LateError("row 3\ncolumn x")

    assert run_command("paravt-x y", late, input_errors=lambda: (LateError,)) == 2
    assert capsys.readouterr().err == "paravt-x y: row 3; column x\n"
    assert run_command("paravt-x y", late, input_errors=(LateError,), raise_unexpected=True) == 2
    with pytest.raises(LateError):
        run_command("paravt-x y", late, raise_unexpected=True)
