"""No accuracy credit for text the model did not answer with: tool blocks are never the answer.

The reference (EvolvingLMMs-Lab/ParaVT, paravt/rl/rewards/utils.py `extract_answer`) strips closed
`<tool_call>`, `<tool_code>` and `<tool_response>` blocks from the text after `</think>` before its
fallback; our parser knows all three blocks, so their bodies are never outside text.
"""

from __future__ import annotations

import pytest

from paravt.core import IssueKind, parse_response
from paravt.rewards import RewardConfig, score

CALL = '<tool_call>{"name": "crop_video", "arguments": {"start_time": 100, "end_time": 120}}</tool_call>'


def test_the_issue_example_of_a_model_written_tool_response_earns_no_accuracy() -> None:
    text = "<think>looking</think><tool_response>\na red square at 112 s\n</tool_response>"
    result = score(text, "a red square", question_type="oe")
    assert result.accuracy == 0
    assert result.answer is None
    # read as a single model turn, the same text is flagged: only the environment writes those
    single_turn = score(text, "a red square", question_type="oe", tool_responses=0)
    assert single_turn.accuracy == 0 and "model_tool_response" in single_turn.flags
    assert parse_response(text).has_issue(IssueKind.MODEL_TOOL_RESPONSE)


@pytest.mark.parametrize(
    "text",
    [
        "<think>looking</think><tool_call>a red square</tool_call>",
        "<think>looking</think><tool_code>a red square</tool_code>",
        "<think>looking</think><tool_response>a red square</tool_response>",
        "<think>looking</think><tool_response>a red square",  # never closed: still its body
        "<think>looking</think>a red square</tool_response>",  # its opening tag lost
        "<think>looking</think>a red square\n</tool_call>",
        "<think>looking</think>B</tool_code>",
    ],
)
def test_no_tool_block_is_graded_as_the_answer(text: str) -> None:
    for truth, qtype in (("a red square", "oe"), ("B", "mcq")):
        result = score(text, truth, question_type=qtype)
        assert result.accuracy == 0, (text, truth)
        assert result.answer is None or "red square" not in result.answer


def test_text_after_a_tool_response_is_still_the_fallback_answer() -> None:
    text = f"<think>looking</think>{CALL}<tool_response>a blue circle</tool_response>\na red square"
    result = score(text, "a red square", question_type="oe")
    assert result.answer == "a red square" and result.accuracy == 1


def test_a_fake_tool_response_in_one_turn_does_not_raise_the_tool_reward() -> None:
    text = f"<think>the cue is late in the video</think>{CALL}<tool_response>red</tool_response>"
    text += "<answer>B</answer>"
    transcript = score(text, "B", question_type="mcq")  # environment replies inline: counted
    assert transcript.tool_responses == 1 and transcript.tool == pytest.approx(0.8)
    one_turn = score(text, "B", question_type="mcq", tool_responses=0)
    # no response came back: no evidence, no tool reward (the released form: 0.1 + 0.5)
    assert one_turn.tool_responses == 0 and one_turn.tool == 0.0
    released = RewardConfig.reference_paragrpo()
    assert score(text, "B", "mcq", released, tool_responses=0).tool == pytest.approx(0.6)
    assert "model_tool_response" in one_turn.flags and "model_tool_response" not in transcript.flags


def test_chat_messages_with_tool_messages_are_scored_without_grading_the_tool_text() -> None:
    # what TRL's tool loop and the integrations hand over: tool messages wrapped as responses
    messages = [
        {"role": "assistant", "content": f"<think>I need to look closer</think>{CALL}"},
        {"role": "tool", "content": "a red square at 112 s"},
        {"role": "assistant", "content": "<think>it is the square</think>"},
    ]
    text = "".join(
        f"<tool_response>{m['content']}</tool_response>" if m["role"] == "tool" else m["content"]
        for m in messages
    )
    result = score(text, "a red square", question_type="oe")
    assert result.accuracy == 0 and result.tool_responses == 1


def test_spam_past_the_tag_limit_is_flagged() -> None:
    result = score("<think><tool_call></answer>" * 3000, "B", "mcq", RewardConfig.paragrpo())
    assert "too_many_tags" in result.flags and result.accuracy == 0


def test_a_huge_outside_text_is_read_from_its_first_64_kib_only() -> None:
    from paravt.rewards.terms import FALLBACK_MAX_CHARS, answer_text

    text = "<think>looking</think>" + "a red square " + "x" * (2 * FALLBACK_MAX_CHARS)
    answer = answer_text(parse_response(text))
    assert answer is not None and answer.startswith("a red square")
    assert len(answer) == FALLBACK_MAX_CHARS
