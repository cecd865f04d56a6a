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
