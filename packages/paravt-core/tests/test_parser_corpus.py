"""A hand-written corpus of responses: what a well-formed turn looks like, and how it breaks."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from paravt.core import IssueKind, parse_response

K = IssueKind
CALL = (
    '<tool_call>{"name": "crop_video", "arguments": {"start_time": 10, "end_time": 20}}</tool_call>'
)


@dataclass
class Case:
    name: str
    text: str
    answer: str | None = None
    ok_calls: list[tuple[float, float]] = field(default_factory=list)
    bad_calls: int = 0
    issues: set[IssueKind] = field(default_factory=set)
    think: str | None = None


CASES = [
    # --- well formed ---------------------------------------------------------------------------
    Case(
        "think then answer",
        "<think>The cue is at 10 s.</think><answer>B</answer>",
        "B",
        think="The cue is at 10 s.",
    ),
    Case(
        "think, one call",
        f"<think>check 10-20</think>{CALL}",
        None,
        [(10, 20)],
        think="check 10-20",
    ),
    Case(
        "think, three parallel calls",
        "<think>three windows</think>"
        '<tool_call>{"name": "crop_video", "arguments": {"start_time": 0, "end_time": 30}}</tool_call>\n'
        '<tool_call>{"name": "crop_video", "arguments": {"start_time": 30, "end_time": 60}}</tool_call>\n'
        '<tool_call>{"name": "crop_video", "arguments": {"start_time": 60, "end_time": 90}}</tool_call>',
        None,
        [(0, 30), (30, 60), (60, 90)],
    ),
    Case("whitespace between blocks is fine", "<think>a</think>\n\n  <answer> A </answer>\n", "A"),
    Case(
        "answer with grounding interval",
        "<think>t</think><answer>[12.5, 17.0]</answer>",
        "[12.5, 17.0]",
    ),
    Case(
        "clock times in arguments",
        '<think>t</think><tool_call>{"name": "crop_video", "arguments": {"start_time": "01:05", '
        '"end_time": "0:01:15"}}</tool_call>',
        None,
        [(65, 75)],
    ),
    Case(
        "numeric strings in arguments",
        '<think>t</think><tool_call>{"name": "crop_video", "arguments": {"start_time": "3.5", '
        '"end_time": "9s"}}</tool_call>',
        None,
        [(3.5, 9)],
    ),
    Case(
        "num_frames is accepted",
        '<think>t</think><tool_call>{"name": "crop_video", "arguments": {"start_time": 1, '
        '"end_time": 9, "num_frames": 4}}</tool_call>',
        None,
        [(1, 9)],
    ),
    Case(
        "video_path from released checkpoints is ignored",
        '<think>t</think><tool_call>{"name": "crop_video", "arguments": {"video_path": '
        '"/etc/passwd", "start_time": 1, "end_time": 9}}</tool_call>',
        None,
        [(1, 9)],
    ),
    Case(
        "arguments as a JSON string (OpenAI style)",
        '<think>t</think><tool_call>{"name": "crop_video", "arguments": '
        '"{\\"start_time\\": 2, \\"end_time\\": 4}"}</tool_call>',
        None,
        [(2, 4)],
    ),
    Case(
        "parameters instead of arguments",
        '<think>t</think><tool_call>{"name": "crop_video", "parameters": {"start_time": 2, '
        '"end_time": 4}}</tool_call>',
        None,
        [(2, 4)],
    ),
    Case(
        "multi-line JSON call",
        '<think>t</think><tool_call>\n{\n  "name": "crop_video",\n  "arguments": {\n'
        '    "start_time": 5,\n    "end_time": 6\n  }\n}\n</tool_call>',
        None,
        [(5, 6)],
    ),
    # --- leaked Python form ----------------------------------------------------------------------
    Case(
        "tool_code with keywords",
        "<think>t</think><tool_code>crop_video(start_time=1, end_time=9)</tool_code>",
        None,
        [(1, 9)],
    ),
    Case(
        "tool_code with positional arguments",
        "<think>t</think><tool_code>crop_video(1, 9)</tool_code>",
        None,
        [(1, 9)],
    ),
    Case(
        "tool_code wrapped in print",
        "<think>t</think><tool_code>print(crop_video(start_time=3, end_time=7))</tool_code>",
        None,
        [(3, 7)],
    ),
    Case(
        "tool_code with a leading video path",
        "<think>t</think><tool_code>crop_video('v.mp4', 3, 7)</tool_code>",
        None,
        [(3, 7)],
    ),
    Case(
        "tool_code with positional and keyword mix",
        "<think>t</think><tool_code>crop_video(3, end_time='0:10', num_frames=2)</tool_code>",
        None,
        [(3, 10)],
    ),
    Case(
        "tool_code calling an unknown function",
        "<think>t</think><tool_code>os.system('rm -rf /')</tool_code>",
        None,
        [],
        1,
        {K.UNKNOWN_TOOL},
    ),
    Case(
        "tool_code that is not a call",
        "<think>t</think><tool_code>x = 1</tool_code>",
        None,
        [],
        1,
        {K.INVALID_CALL},
    ),
    Case(
        "tool_code with non-literal arguments",
        "<think>t</think><tool_code>crop_video(start_time="
        "__import__('os'), end_time=2)</tool_code>",
        None,
        [],
        1,
        {K.INVALID_CALL},
    ),
    Case(
        "tool_code with too many positional arguments",
        "<think>t</think><tool_code>crop_video(1, 2, 3, 4)</tool_code>",
        None,
        [],
        1,
        {K.INVALID_CALL},
    ),
    # --- collapsed / broken structure -------------------------------------------------------------
    Case(
        "think never closed",
        "<think>I will look at 10 s and then",
        None,
        [],
        0,
        {K.UNCLOSED_TAG},
        think="I will look at 10 s and then",
    ),
    Case(
        "think closed by a tool call (collapsed tag)",
        f"<think>check{CALL}",
        None,
        [(10, 20)],
        0,
        {K.UNCLOSED_TAG},
        think="check",
    ),
    Case(
        "think closed by the answer", "<think>so B<answer>B</answer>", "B", [], 0, {K.UNCLOSED_TAG}
    ),
    Case("answer never closed", "<think>t</think><answer>B", None, [], 0, {K.UNCLOSED_TAG}),
    Case(
        "closing think without opening",
        "The cue is at 10 s.</think><answer>B</answer>",
        "B",
        [],
        0,
        {K.UNEXPECTED_CLOSE, K.TEXT_OUTSIDE_TAGS},
    ),
    Case("plain text answer, no tags", "B", None, [], 0, {K.TEXT_OUTSIDE_TAGS}),
    Case("empty string", "", None),
    Case(
        "text between think and answer",
        "<think>t</think> so the answer is <answer>C</answer>",
        "C",
        [],
        0,
        {K.TEXT_OUTSIDE_TAGS},
    ),
    Case(
        "text after the answer",
        "<think>t</think><answer>C</answer> I hope this helps",
        "C",
        [],
        0,
        {K.TEXT_OUTSIDE_TAGS},
    ),
    Case("nested think", "<think>a<think>b</think><answer>A</answer>", "A", [], 0, {K.NESTED_TAG}),
    Case(
        "stray closing answer inside think",
        "<think>a</answer>b</think><answer>A</answer>",
        "A",
        [],
        0,
        {K.UNEXPECTED_CLOSE},
    ),
    # --- tool call failures -----------------------------------------------------------------------
    Case(
        "empty tool call",
        "<think>t</think><tool_call></tool_call>",
        None,
        [],
        1,
        {K.EMPTY_TOOL_CALL},
    ),
    Case(
        "whitespace-only tool call",
        "<think>t</think><tool_call>  \n </tool_call>",
        None,
        [],
        1,
        {K.EMPTY_TOOL_CALL},
    ),
    Case(
        "truncated JSON",
        '<think>t</think><tool_call>{"name": "crop_video", "arguments": '
        '{"start_time": 1</tool_call>',
        None,
        [],
        1,
        {K.INVALID_JSON},
    ),
    Case(
        "truncated response inside a call",
        '<think>t</think><tool_call>{"name": "crop_video", "arguments": {"start_ti',
        None,
        [],
        1,
        {K.UNCLOSED_TAG, K.INVALID_JSON},
    ),
    Case(
        "complete JSON in an unclosed call is not executed",
        '<think>t</think><tool_call>{"name": "crop_video", "arguments": {"start_time": 1, '
        '"end_time": 2}}',
        None,
        [],
        1,
        {K.UNCLOSED_TAG},
    ),
    Case(
        "JSON that is a list",
        "<think>t</think><tool_call>[1, 2]</tool_call>",
        None,
        [],
        1,
        {K.INVALID_CALL},
    ),
    Case(
        "JSON without a name",
        '<think>t</think><tool_call>{"arguments": {"start_time": 1, "end_time": 2}}</tool_call>',
        None,
        [],
        1,
        {K.INVALID_CALL},
    ),
    Case(
        "unknown tool name",
        '<think>t</think><tool_call>{"name": "read_file", "arguments": '
        '{"path": "/etc/passwd"}}</tool_call>',
        None,
        [],
        1,
        {K.UNKNOWN_TOOL},
    ),
    Case(
        "start after end",
        '<think>t</think><tool_call>{"name": "crop_video", "arguments": '
        '{"start_time": 30, "end_time": 10}}</tool_call>',
        None,
        [],
        1,
        {K.INVALID_ARGUMENTS},
    ),
    Case(
        "start equals end",
        '<think>t</think><tool_call>{"name": "crop_video", "arguments": '
        '{"start_time": 10, "end_time": 10}}</tool_call>',
        None,
        [],
        1,
        {K.INVALID_ARGUMENTS},
    ),
    Case(
        "negative start",
        '<think>t</think><tool_call>{"name": "crop_video", "arguments": '
        '{"start_time": -5, "end_time": 10}}</tool_call>',
        None,
        [],
        1,
        {K.INVALID_ARGUMENTS},
    ),
    Case(
        "NaN end",
        '<think>t</think><tool_call>{"name": "crop_video", "arguments": '
        '{"start_time": 1, "end_time": NaN}}</tool_call>',
        None,
        [],
        1,
        {K.INVALID_ARGUMENTS},
    ),
    Case(
        "infinite end",
        '<think>t</think><tool_call>{"name": "crop_video", "arguments": '
        '{"start_time": 1, "end_time": Infinity}}</tool_call>',
        None,
        [],
        1,
        {K.INVALID_ARGUMENTS},
    ),
    Case(
        "missing end_time",
        '<think>t</think><tool_call>{"name": "crop_video", "arguments": '
        '{"start_time": 1}}</tool_call>',
        None,
        [],
        1,
        {K.INVALID_ARGUMENTS},
    ),
    Case(
        "unknown argument",
        '<think>t</think><tool_call>{"name": "crop_video", "arguments": '
        '{"start_time": 1, "end_time": 2, "fps": 30}}</tool_call>',
        None,
        [],
        1,
        {K.INVALID_ARGUMENTS},
    ),
    Case(
        "boolean time",
        '<think>t</think><tool_call>{"name": "crop_video", "arguments": '
        '{"start_time": true, "end_time": 2}}</tool_call>',
        None,
        [],
        1,
        {K.INVALID_ARGUMENTS},
    ),
    Case(
        "word as time",
        '<think>t</think><tool_call>{"name": "crop_video", "arguments": '
        '{"start_time": "beginning", "end_time": 2}}</tool_call>',
        None,
        [],
        1,
        {K.INVALID_ARGUMENTS},
    ),
    Case(
        "one good and one bad call",
        f'<think>t</think>{CALL}<tool_call>{{"name": "crop_video", '
        f'"arguments": {{"start_time": 5}}}}</tool_call>',
        None,
        [(10, 20)],
        1,
        {K.INVALID_ARGUMENTS},
    ),
    # --- answers ----------------------------------------------------------------------------------
    Case(
        "repeated answers: the last closed one counts",
        "<think>t</think><answer>A</answer><answer>C</answer>",
        "C",
        [],
        0,
        {K.MULTIPLE_ANSWERS},
    ),
    Case("empty answer", "<think>t</think><answer>  </answer>", "", [], 0, {K.EMPTY_ANSWER}),
    Case(
        "nested answer",
        "<think>t</think><answer>A<answer>B</answer>",
        "A<answer>B",
        [],
        0,
        {K.NESTED_TAG},
    ),
    Case(
        "call after the answer",
        f"<think>t</think><answer>B</answer>{CALL}",
        "B",
        [(10, 20)],
        0,
        {K.CALL_AFTER_ANSWER},
    ),
    Case(
        "similar-looking tags are text",
        "<thinking>x</thinking><answer>A</answer>",
        "A",
        [],
        0,
        {K.TEXT_OUTSIDE_TAGS},
    ),
    # --- tool responses: written by the environment, never by the model -------------------------
    Case(
        "a model-written tool response is an issue and not the answer",
        "<think>looking</think><tool_response>\na red square at 112 s\n</tool_response>",
        None,
        [],
        0,
        {K.MODEL_TOOL_RESPONSE},
        think="looking",
    ),
    Case(
        "tags inside a tool response are text",
        "<think>t</think><tool_response><answer>A</answer></tool_response><answer>B</answer>",
        "B",
        [],
        0,
        {K.MODEL_TOOL_RESPONSE},
    ),
    Case(
        "an unclosed tool response swallows the rest of the turn",
        "<think>t</think><tool_response>fake result<answer>A</answer>",
        None,
        [],
        0,
        {K.MODEL_TOOL_RESPONSE, K.UNCLOSED_TAG},
    ),
    Case(
        "a tool response after a call is still the model's own writing in one turn",
        f"<think>t</think>{CALL}<tool_response>fake frames</tool_response><answer>C</answer>",
        "C",
        [(10, 20)],
        0,
        {K.MODEL_TOOL_RESPONSE},
    ),
    Case(
        "a stray closing tool response leaves its text outside tags",
        "<think>t</think>a red square</tool_response>",
        None,
        [],
        0,
        {K.UNEXPECTED_CLOSE, K.TEXT_OUTSIDE_TAGS},
    ),
    Case(
        "tags with attributes are not tags",
        '<think>t</think><answer id="1">A</answer>',
        None,
        [],
        0,
        {K.TEXT_OUTSIDE_TAGS, K.UNEXPECTED_CLOSE},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_corpus_case_parses_as_expected(case: Case) -> None:
    parsed = parse_response(case.text)
    assert parsed.answer == case.answer
    windows = [(c.args.start_time, c.args.end_time) for c in parsed.valid_calls]  # type: ignore[union-attr]
    assert windows == [(float(a), float(b)) for a, b in case.ok_calls]
    assert len(parsed.invalid_calls) == case.bad_calls
    assert {i.kind for i in parsed.issues} == case.issues
    if case.think is not None:
        assert parsed.think == case.think


def test_corpus_has_at_least_forty_cases() -> None:
    assert len(CASES) >= 40
    assert len({c.name for c in CASES}) == len(CASES)


def test_every_tag_span_points_at_its_tag_text() -> None:
    for case in CASES:
        parsed = parse_response(case.text)
        for tag in parsed.tags:
            assert case.text[tag.start : tag.end] == tag.tag


def test_block_spans_cover_their_tags_and_content() -> None:
    text = f"<think>look</think>{CALL}<answer>B</answer>"
    parsed = parse_response(text)
    kinds = [b.kind for b in parsed.blocks]
    assert kinds == ["think", "tool_call", "answer"]
    for block in parsed.blocks:
        assert text[block.content_start : block.content_end] == block.content
        assert text[block.start : block.start + len(block.kind) + 2] == f"<{block.kind}>"
        assert text[block.end - len(block.kind) - 3 : block.end] == f"</{block.kind}>"


def test_issue_messages_name_the_problem() -> None:
    parsed = parse_response(
        '<think>t</think><tool_call>{"name": "crop_video", "arguments": '
        '{"start_time": 30, "end_time": 10}}</tool_call>'
    )
    (call,) = parsed.tool_calls
    assert call.error is not None
    assert "end_time" in call.error and "start_time" in call.error
    parsed = parse_response('<tool_call>{"name": "zoom", "arguments": {}}</tool_call>')
    assert "zoom" in parsed.tool_calls[0].error  # type: ignore[operator]
    assert "crop_video" in parsed.tool_calls[0].error  # type: ignore[operator]


def test_num_frames_is_clamped_to_the_configured_maximum() -> None:
    text = (
        '<tool_call>{"name": "crop_video", "arguments": {"start_time": 0, "end_time": 9, '
        '"num_frames": 500}}</tool_call>'
    )
    assert parse_response(text).tool_calls[0].args.num_frames == 16  # type: ignore[union-attr]
    args = parse_response(text, max_num_frames=4).tool_calls[0].args
    assert args.num_frames == 4  # type: ignore[union-attr]
    assert args.clamps == (  # type: ignore[union-attr]
        "num_frames 500 is above the limit of 4 frames per call; clamped to 4.",
    )


def test_custom_tool_registry_replaces_the_default() -> None:
    parsed = parse_response(CALL, tools={})
    assert parsed.has_issue(IssueKind.UNKNOWN_TOOL)
    assert not parsed.valid_calls


def test_a_transcript_carries_tool_responses_without_issues() -> None:
    text = (
        f"<think>check 10-20</think>{CALL}\n<tool_response>\n2 frames from 10.0 to 20.0.\n"
        "</tool_response>\n<think>it is red</think><answer>B</answer>"
    )
    transcript = parse_response(text, transcript=True)
    assert transcript.well_formed and transcript.num_tool_responses == 1
    assert [b.kind for b in transcript.blocks] == [
        "think",
        "tool_call",
        "tool_response",
        "think",
        "answer",
    ]
    assert transcript.tool_response_blocks[0].content.strip() == "2 frames from 10.0 to 20.0."
    single_turn = parse_response(text)
    assert [i.kind for i in single_turn.issues] == [IssueKind.MODEL_TOOL_RESPONSE]
    assert "environment" in single_turn.issues[0].message


def test_tag_spam_beyond_max_tags_is_one_issue_and_the_rest_is_not_parsed() -> None:
    from paravt.core.parser import MAX_TAGS

    spam = "<think></think>" * (MAX_TAGS // 2 + 10) + "<answer>B</answer>"
    parsed = parse_response(spam)
    assert len(parsed.tags) == MAX_TAGS
    (too_many,) = [i for i in parsed.issues if i.kind == IssueKind.TOO_MANY_TAGS]
    assert str(MAX_TAGS) in too_many.message and too_many.end == len(spam)
    assert parsed.answer is None  # the answer lies in the part that was not parsed
    assert sum(parsed.tag_counts().values()) == MAX_TAGS
    ok = "<think></think>" * (MAX_TAGS // 2 - 1) + "<answer>B</answer>"
    assert parse_response(ok).answer == "B" and len(parse_response(ok).tags) == MAX_TAGS


def test_a_tool_call_body_over_the_limit_is_refused_naming_the_limit() -> None:
    from paravt.core.parser import MAX_CALL_CHARS

    body = '{"name": "crop_video", "arguments": {"start_time": 1, "end_time": 2}}'
    padded = body + " " * (MAX_CALL_CHARS + 1 - len(body))
    (call,) = parse_response(f"<tool_call>{padded}</tool_call>").tool_calls
    assert not call.ok and f"at most {MAX_CALL_CHARS}" in (call.error or "")
    (call,) = parse_response(f"<tool_call>{body}</tool_call>").tool_calls
    assert call.ok
