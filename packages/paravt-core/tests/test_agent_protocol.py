"""AgentProtocol: one saved value per checkpoint; paravt's matches the prompt builders; paper's reads
replies as the released driver does."""

from __future__ import annotations

import json

import pytest

from paravt.core import (
    PAPER_PROTOCOL,
    PARAVT_PROTOCOL,
    AgentProtocol,
    Frame,
    ImagePart,
    build_main_prompt,
    get_protocol,
)
from paravt.core.agent_protocol import PROTOCOL_FILE
from paravt.core.paper_protocol import (
    driver_letter,
    driver_span,
    driver_tool_calls,
    driver_window,
)
from paravt.core.protocol import CropVideoArgs, ToolOutput
from paravt.core.protocol import Frame as F


def test_save_and_load_round_trip_and_absence(tmp_path):
    assert AgentProtocol.load(tmp_path) is None
    for protocol in (PARAVT_PROTOCOL, PAPER_PROTOCOL.with_overrides(prompt_mode="agentic_minimal")):
        path = protocol.save(tmp_path / protocol.name)
        assert path.name == PROTOCOL_FILE
        assert AgentProtocol.load(tmp_path / protocol.name) == protocol
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / PROTOCOL_FILE).write_text(json.dumps({"name": 3}))
    with pytest.raises(ValueError, match="not a valid agent protocol"):
        AgentProtocol.load(tmp_path / "bad")


def test_paravt_protocol_builds_what_the_prompt_builders_build():
    frames = [Frame(f"img{i}", t) for i, t in enumerate([0.0, 5.0, 9.5])]
    for mode in ("direct", "reasoning", "agentic_general", "agentic_minimal"):
        protocol = get_protocol("paravt", mode)
        text = protocol.format_question("Which colour?", ["red", "blue"])
        ours = protocol.build_main_prompt(text, frames, duration_s=10.0)
        ref = build_main_prompt(
            "Which colour?", frames, mode=mode, options=["red", "blue"], duration_s=10.0
        )
        assert [(m.role, m.content) for m in ours] == [(m.role, m.content) for m in ref]
        assert protocol.assistant_prefix == ("" if mode == "direct" else "<think>\n")


def test_paper_protocol_first_turn_is_images_then_the_driver_question():
    protocol = get_protocol("paper", "agentic_general")
    text = protocol.format_question("What happens?", ["a cat", "a dog"])
    assert text == (
        "Question: What happens?\nOptions:\nA. a cat\nB. a dog\nAnswer with the option letter only."
    )
    messages = protocol.build_main_prompt(text, [F("i0", 0.0), F("i1", 1.0)], video_name="v.mp4")
    assert messages[0].role == "system" and '"video_path"' in messages[0].content
    parts = messages[1].parts
    assert [type(p).__name__ for p in parts] == ["ImagePart", "ImagePart", "TextPart"]
    assert parts[-1].text == text + " The video path for this video is: v.mp4"
    direct = get_protocol("paper", "direct")
    assert "<answer>X</answer>" in direct.format_question("Q", ["x", "y"])
    assert direct.build_main_prompt("Q", [])[1].parts[-1].text == "Q"  # no path suffix
    assert direct.runtime_max_turns() == 1 and direct.final_max_new_tokens("mcq") is None
    assert protocol.runtime_max_turns() == 4
    assert protocol.final_max_new_tokens("mcq") == 64
    assert protocol.final_max_new_tokens("grounding") == 128


def test_paper_tool_results_are_one_user_message_per_call_with_the_requested_window():
    protocol = get_protocol("paper")
    ok = ToolOutput(frames=[F("a", 1.0), F("b", 3.0)])
    args = CropVideoArgs.model_construct(start_time=1.0, end_time=4.0, num_frames=None)
    bad = CropVideoArgs.model_construct(start_time=9.0, end_time=2.0, num_frames=None)
    msgs = protocol.tool_messages(
        [
            (args, ok, None, True),
            (bad, ToolOutput.failure("x"), None, True),
            (None, ToolOutput.failure("over the cap"), None, False),
        ]
    )
    assert len(msgs) == 2 and all(m.role == "user" for m in msgs)
    assert [isinstance(p, ImagePart) for p in msgs[0].parts] == [True, True, False]
    assert (
        msgs[0].parts[-1].text == "<tool_response>\n2 frames from 1.0s to 4.0s.\n</tool_response>"
    )
    assert msgs[1].content == "<tool_response>\n[Error cropping 9.0s-2.0s]\n</tool_response>"


def test_driver_reading_of_calls_aliases_clocks_missing_end_and_tool_code():
    text = (
        '<tool_call>{"name": "crop_video", "arguments": {"start": "01:05", "end": "1:10"}}</tool_call>'
        '<tool_call>{"name": "crop_video", "arguments": {"start_time": 7}}</tool_call>'
        "<tool_call>{not json}</tool_call>"
        "<tool_code>crop_video(start_time=2, end_time='00:00:09')</tool_code>"
    )
    calls = driver_tool_calls(text)
    assert len(calls) == 3
    assert [driver_window(c) for c in calls] == [(65.0, 70.0), (7.0, 17.0), (2.0, 9.0)]
    read = get_protocol("paper").read_calls(text)
    assert [(c.args.start_time, c.args.end_time) for c in read] == [
        (65.0, 70.0),
        (7.0, 17.0),
        (2.0, 9.0),
    ]
    assert PARAVT_PROTOCOL.read_calls(text) is None
    with pytest.raises(TypeError):
        driver_window([1, 2])


@pytest.mark.parametrize(
    ("text", "letter"),
    [
        ("<answer>B</answer>", "B"),
        ("The answer is C.", "C"),
        ("D", "D"),
        ("Maybe (A) fits", "A"),
        ("I think B", "I"),
        ("<answer>Option E is right</answer>", "E"),
        ("xyz", "x"),
        ("", ""),
    ],
)
def test_driver_letter(text, letter):
    assert driver_letter(text) == letter


@pytest.mark.parametrize(
    ("text", "span"),
    [
        ("The event happens in the 12.0 - 20.0 seconds.", [12.0, 20.0]),
        ("<time>00:19.7 - 00:25.6</time>", [19.7, 25.6]),
        ("[12.0, 20.0]", [12.0, 20.0]),
        ("start 3 and end 9", [3.0, 9.0]),
        ("nothing", None),
        ("20 - 10 then 1", [20.0, 10.0]),
    ],
)
def test_driver_span(text, span):
    assert driver_span(text) == span


def test_grounding_answers_reach_scorers_as_a_dash_span():
    assert PARAVT_PROTOCOL.extract_answer("", "[12.0, 20.0]", "grounding") == "12.0 - 20.0"
    assert PARAVT_PROTOCOL.extract_answer("", "B", "mcq") == "B"
    # paper: the driver's letter alone, not the reply (whose reasoning may name other letters)
    assert (
        PAPER_PROTOCOL.extract_answer("<think>not A</think><answer>B</answer>", "B", "mcq") == "B"
    )
    assert PAPER_PROTOCOL.extract_answer("[12.0, 20.25]", None, "grounding") == "12.0 - 20.25"


@pytest.mark.parametrize(
    ("reply", "kind", "scored"),
    [
        # the <answer> block wins over letters in the reasoning, closed think or not
        ("<think>It is not A, nor C.</think><answer>B</answer>", "mcq", "B"),
        ("<think>A? no, the rider is on a bike <answer>B</answer>", "mcq", "B"),
        # no answer block (a think cut off by max_tokens): the driver's first standalone letter
        ("<think>A horse would be taller, so the answer", "mcq", "A"),
        # an empty answer block: the driver reads the rest of the reply; nothing there, nothing
        ("<think>C fits.</think><answer></answer>", "mcq", "C"),
        ("<think>hmm</think><answer> </answer>", "mcq", ""),
        ("none of these", "mcq", ""),  # the driver's pred 'n' is no option letter
        ("", "mcq", ""),
        # spans: seconds, clock times, bracket pairs, precision kept; none, reversed or empty -> ''
        ("The event happens in the 2.0 - 6.5 seconds.", "grounding", "2.0 - 6.5"),
        ("<time>00:19.7 - 00:25.6</time>", "grounding", "19.7 - 25.6"),
        ("from 1:05 – 1:30", "grounding", "65.0 - 90.0"),
        ("<answer>[5.5, 8.25]</answer>", "grounding", "5.5 - 8.25"),
        ("starting at 3.125 and ending at 9", "grounding", "3.125 - 9.0"),
        ("begin 6.5 end 2", "grounding", ""),
        ("3 - 3", "grounding", ""),
        ("nothing here", "grounding", ""),
    ],
)
def test_paper_answers_reach_scorers_as_the_drivers_prediction(reply, kind, scored):
    assert PAPER_PROTOCOL.extract_answer(reply, None, kind) == scored


def test_paper_grounding_questions_take_the_drivers_charades_mode():
    assert PAPER_PROTOCOL.prompt_mode == "agentic_general"
    grounding = PAPER_PROTOCOL.for_question("grounding")
    assert grounding.prompt_mode == "agentic_minimal"
    assert (
        grounding.system_prompt()
        == PAPER_PROTOCOL.with_overrides(prompt_mode="agentic_minimal").system_prompt()
    )
    assert PAPER_PROTOCOL.for_question("mcq") is PAPER_PROTOCOL
    assert PARAVT_PROTOCOL.for_question("grounding") is PARAVT_PROTOCOL
    cleared = PAPER_PROTOCOL.with_overrides(grounding_prompt_mode=None)
    assert cleared.for_question("grounding").prompt_mode == "agentic_general"
