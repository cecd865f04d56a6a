"""crop_video arguments: what the model may send and what it may not."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from paravt.core import CropVideoArgs, crop_video_schema, parse_time_s
from paravt.core.protocol import format_validation_error


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (12, 12.0),
        (12.5, 12.5),
        ("12.5", 12.5),
        ("12.5s", 12.5),
        ("7 seconds", 7.0),
        ("01:05", 65.0),
        ("1:02:03", 3723.0),
        ("00:00:07.5", 7.5),
        (" 3 ", 3.0),
    ],
)
def test_times_accept_numbers_numeric_strings_and_clocks(value: object, seconds: float) -> None:
    assert parse_time_s(value) == seconds


@pytest.mark.parametrize(
    "value", [math.nan, math.inf, -1, "-3", "abc", "1:75", "1:60:00", True, None, [1], "9" * 40]
)
def test_times_reject_garbage_with_the_field_name(value: object) -> None:
    with pytest.raises(ValueError, match="start_time"):
        parse_time_s(value, field_name="start_time")


def test_start_must_precede_end_and_the_message_names_both() -> None:
    with pytest.raises(ValidationError) as info:
        CropVideoArgs.model_validate({"start_time": 9, "end_time": 5})
    text = format_validation_error("crop_video", info.value)
    assert text.startswith("crop_video:") and "end_time" in text and "start_time" in text


def test_video_path_is_accepted_but_never_kept() -> None:
    args = CropVideoArgs.model_validate(
        {"video_path": "/etc/shadow", "start_time": 0, "end_time": 1}
    )
    assert args.video_path is None
    assert "video_path" not in args.model_dump()


def test_num_frames_must_be_positive_and_whole() -> None:
    for bad in (0, -2, 2.5, True, "many"):
        with pytest.raises(ValidationError):
            CropVideoArgs.model_validate({"start_time": 0, "end_time": 1, "num_frames": bad})
    ok = CropVideoArgs.model_validate({"start_time": 0, "end_time": 1, "num_frames": "4"})
    assert ok.num_frames == 4


def test_unknown_arguments_are_rejected_by_name() -> None:
    with pytest.raises(ValidationError) as info:
        CropVideoArgs.model_validate({"start_time": 0, "end_time": 1, "path": "x"})
    assert "path" in format_validation_error("crop_video", info.value)


def test_tool_schema_is_generated_from_the_model_and_is_json() -> None:
    schema = crop_video_schema()
    fn = schema["function"]
    assert fn["name"] == "crop_video"
    assert fn["parameters"]["required"] == ["start_time", "end_time"]
    assert set(fn["parameters"]["properties"]) == {"start_time", "end_time", "num_frames"}
    assert fn["parameters"]["properties"]["num_frames"]["type"] == "integer"
    # field help text comes from CropVideoArgs, not a second copy
    start = fn["parameters"]["properties"]["start_time"]["description"]
    assert start == CropVideoArgs.model_fields["start_time"].description
    json.dumps(schema)
    legacy = crop_video_schema(include_video_path=True)["function"]["parameters"]
    assert legacy["required"][0] == "video_path"


@given(st.floats(min_value=0, max_value=1e6), st.floats(min_value=0, max_value=1e6))
def test_valid_windows_are_finite_and_ordered(a: float, b: float) -> None:
    if a < b:
        args = CropVideoArgs(start_time=a, end_time=b)
        assert math.isfinite(args.duration_s) and args.duration_s > 0
    else:
        with pytest.raises(ValidationError):
            CropVideoArgs(start_time=a, end_time=b)


# --- every bound: an error naming the argument and its range, or a clamp stated in words ---------


@pytest.mark.parametrize(
    ("arguments", "named", "range_text"),
    [
        ({"start_time": -5, "end_time": 10}, "start_time", ">= 0 s"),
        ({"start_time": 0, "end_time": -1}, "end_time", ">= 0 s"),
        ({"start_time": math.nan, "end_time": 10}, "start_time", "finite number of seconds >= 0"),
        ({"start_time": 0, "end_time": math.inf}, "end_time", "finite number of seconds >= 0"),
        ({"start_time": "9" * 40, "end_time": 10}, "start_time", "at most 32 characters"),
        ({"start_time": "1:75", "end_time": 100}, "start_time", "below 60"),
        ({"start_time": 30, "end_time": 10}, "end_time (10 s)", "greater than start_time (30 s)"),
        ({"start_time": 0, "end_time": 9, "num_frames": 0}, "num_frames", "allowed: 1 to 16"),
        ({"start_time": 0, "end_time": 9, "num_frames": -3}, "num_frames", "allowed: 1 to 16"),
        ({"start_time": 0, "end_time": 9, "num_frames": "-3"}, "num_frames", "allowed: 1 to 16"),
        ({"start_time": 0, "end_time": 9, "num_frames": 2.5}, "num_frames", "allowed: 1 to 16"),
        ({"start_time": 0, "end_time": 9, "num_frames": True}, "num_frames", "allowed: 1 to 16"),
        ({"start_time": 0, "end_time": 9, "fps": 30}, "fps", "expected start_time, end_time"),
    ],
)
def test_an_out_of_range_argument_is_an_error_naming_it_and_its_range(
    arguments: dict[str, object], named: str, range_text: str
) -> None:
    with pytest.raises(ValidationError) as info:
        CropVideoArgs.model_validate(arguments)
    text = format_validation_error("crop_video", info.value)
    assert text.startswith(f"crop_video: {named}") and range_text in text, text


@pytest.mark.parametrize(
    ("requested", "limit", "shown"),
    [(17, None, "17"), (1_000_000_000, None, "1000000000"), (10**40, 4, "1.000e+40"), (5, 4, "5")],
)
def test_num_frames_above_the_limit_is_clamped_and_the_clamp_is_stated(
    requested: int, limit: int | None, shown: str
) -> None:
    context = {"max_num_frames": limit} if limit else {}
    args = CropVideoArgs.model_validate(
        {"start_time": 0, "end_time": 9, "num_frames": requested}, context=context
    )
    bound = limit or 16
    assert args.num_frames == bound
    (clamp,) = args.clamps
    assert clamp == (
        f"num_frames {shown} is above the limit of {bound} frames per call; clamped to {bound}."
    )
    # at the limit nothing changes and nothing is stated
    at_limit = CropVideoArgs.model_validate(
        {"start_time": 0, "end_time": 9, "num_frames": bound}, context=context
    )
    assert at_limit.num_frames == bound and at_limit.clamps == ()


def test_a_validation_clamp_reaches_the_tool_response_and_the_calls_trace() -> None:
    from paravt.core import AgentConfig, AgentTask, Frame, build_main_prompt, run_episodes_sync
    from paravt.core.testing import END_OF_TURN, ScriptedEngine, StaticToolbox

    call = (
        '<tool_call>{"name": "crop_video", "arguments": {"start_time": 0, "end_time": 30, '
        '"num_frames": 1000000000}}</tool_call>'
    )

    def respond(traj):  # type: ignore[no-untyped-def]
        if traj.role == "subagent":
            return "<answer>seen</answer>" + END_OF_TURN
        done = any(m.role == "assistant" for m in traj.messages)
        return ("</think><answer>A</answer>" if done else "look</think>" + call) + END_OF_TURN

    messages = build_main_prompt("What colour?", [Frame("ov", 5.0)], duration_s=60.0)
    toolbox = StaticToolbox(duration_s=60.0)  # states nothing itself: the runtime adds the clamp
    task = AgentTask("s0", messages, toolbox, "What colour?")
    config = AgentConfig(max_num_frames=8, tool_response="frames")
    (episode,) = run_episodes_sync([task], ScriptedEngine(respond), config)
    (record,) = episode.turns[0].calls
    expected = "num_frames 1000000000 is above the limit of 8 frames per call; clamped to 8."
    assert record.executed and record.num_frames == 8
    assert record.clamps == [expected] and record.to_dict()["clamps"] == [expected]
    assert record.note.startswith(expected)
    (tool_message,) = [m for m in episode.main.messages if m.role == "tool"]
    assert expected in tool_message.text


def test_message_text_skips_the_null_text_of_parts_read_from_a_table() -> None:
    # pyarrow's to_pylist (a parquet file, a Hugging Face dataset) gives every part of a
    # list<struct> column every field, None where the part has none: the video part's null text
    # must not become the word "None" in front of the question
    from paravt.core import content_text

    parts = [
        {"type": "video", "video": "a.mp4", "text": None},
        {"type": "text", "video": None, "text": "What colour is the square?"},
    ]
    assert content_text(parts) == "What colour is the square?"
    assert content_text([{"type": "image"}, {"type": "text", "text": "a"}, "b"]) == "a"
    assert content_text("plain") == "plain"
    assert content_text(None) == ""
