"""`episode_structure`: one format measure for every arm, and the tool prior's leaks."""

from __future__ import annotations

from paravt.core import parse_response
from paravt.rewards import episode_structure

CALL = (
    '<tool_call>{"name": "crop_video", "arguments": {"start_time": 0, "end_time": 8}}</tool_call>'
)


def shape(*turns: str):  # type: ignore[no-untyped-def]
    return episode_structure([parse_response(t) for t in turns])


def test_a_clean_paravt_episode_parses_and_does_not_leak() -> None:
    s = shape(
        "<think>\nI look closer.\n</think>\n" + CALL,
        "<think>\nSeen.\n</think>\n<answer>red</answer>",
    )
    assert s.parses and not s.prior_leak


def test_the_priors_call_envelope_is_a_leak_even_though_it_runs() -> None:
    s = shape("<tool_code>crop_video(start_time=0, end_time=8)</tool_code>", "<answer>red</answer>")
    assert s.tool_code and s.prior_leak and not s.parses


def test_an_untagged_answer_is_a_leak_and_does_not_parse() -> None:
    s = shape("The square is red.")
    assert s.untagged_answer and s.prior_leak and not s.parses and not s.tool_code


def test_broken_structure_without_a_leak() -> None:
    unclosed = shape("<think>\nI look closer.\n<answer>red</answer>")
    assert not unclosed.parses and not unclosed.prior_leak
    empty = shape("<think>\nx\n</think>\n<answer> </answer>")
    assert not empty.parses
    assert not episode_structure([]).parses
