"""Prompt builders: every frame carries its timestamp, every mode is distinct and documented."""

from __future__ import annotations

import pytest

from paravt.core import PROMPT_MODES, Frame, ImagePart, TextPart, build_main_prompt
from paravt.core.prompts import (
    build_subagent_prompt,
    format_question,
    system_prompt,
    tool_response_message,
)
from paravt.core.protocol import ToolOutput


def test_overview_frames_are_each_preceded_by_their_timestamp() -> None:
    frames = [Frame(f"img{i}", t) for i, t in enumerate([0.0, 12.5, 600.04])]
    user = build_main_prompt("Q?", frames)[1]
    parts = user.parts
    images = [i for i, p in enumerate(parts) if isinstance(p, ImagePart)]
    assert len(images) == 3
    stamps = [parts[i - 1] for i in images]
    assert [s.text for s in stamps if isinstance(s, TextPart)] == [
        "<0.0 seconds>",
        "<12.5 seconds>",
        "<600.0 seconds>",
    ]


def test_agentic_modes_carry_the_tool_schema_and_others_do_not() -> None:
    for mode in PROMPT_MODES:
        text = system_prompt(mode)
        assert ("crop_video" in text) == mode.startswith("agentic")
    general = system_prompt("agentic_general", max_turns=4, max_parallel=2)
    assert "at most 4 turns and 2 calls per turn" in general
    assert "<tool_call>" in general and "<answer>" in general


def test_unknown_mode_names_the_choices() -> None:
    with pytest.raises(ValueError, match="agentic_minimal"):
        system_prompt("fancy")  # type: ignore[arg-type]


def test_options_are_lettered() -> None:
    assert format_question("Colour?", ["red", "blue"]) == "Colour?\nA. red\nB. blue"


def test_subagent_prompt_names_the_window() -> None:
    msgs = build_subagent_prompt("Q?", (10.0, 20.0), [Frame("x", 11.0)])
    assert "10.0 s to 20.0 s" in msgs[0].text
    assert msgs[1].images == ["x"]


def test_tool_responses_in_both_modes_and_errors() -> None:
    out = ToolOutput(
        text="2 frames", frames=[Frame("a", 1.0), Frame("b", 2.0)], window_s=(0.0, 3.0)
    )
    summary = tool_response_message(out, summary="a red square at 1 s")
    assert summary.role == "tool" and summary.images == []
    assert summary.text == "[0.0 s - 3.0 s] 2 frames\na red square at 1 s"
    frames = tool_response_message(out)
    assert frames.images == ["a", "b"] and "<1.0 seconds>" in frames.text
    err = tool_response_message(ToolOutput.failure("window past the end"))
    assert err.text == "crop_video error: window past the end"
