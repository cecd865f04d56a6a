"""TRL's tool mode: assistant turns parsed into reasoning_content / content / tool_calls.

The messages below are what TRL 1.16's `parse_response` makes of a Qwen3 turn (the response
template puts `<think>` in `reasoning_content` and each `<tool_call>` JSON in `tool_calls`) and
what its tool loop appends (`{"role": "tool", "name", "content"}`).
"""

from __future__ import annotations

from typing import Any

from paravt.rewards import RewardConfig, score
from paravt.rewards.integrations import trl_reward_funcs
from paravt.rewards.integrations.common import split_completion

THINK1 = "The overview shows a square near 10 s; I crop 8-14 s to check its colour."
THINK2 = "The cropped frames show a blue square at 10 s."
CALL = {
    "type": "function",
    "function": {"name": "crop_video", "arguments": {"start_time": 8.0, "end_time": 14.0}},
}
COMPLETION: list[dict[str, Any]] = [
    {"role": "assistant", "reasoning_content": THINK1, "content": "", "tool_calls": [CALL]},
    {"role": "tool", "name": "crop_video", "content": "[8.0 s - 14.0 s] <8.0 seconds>"},
    {"role": "assistant", "reasoning_content": THINK2, "content": "<answer>B</answer>"},
]
# The same completion as the model wrote it, with the tool response inline (a transcript).
RAW = (
    f"<think>\n{THINK1}\n</think>\n\n<tool_call>\n"
    '{"name": "crop_video", "arguments": {"start_time": 8.0, "end_time": 14.0}}\n</tool_call>'
    "\n<tool_response>\n[8.0 s - 14.0 s] <8.0 seconds>\n</tool_response>\n"
    f"<think>\n{THINK2}\n</think>\n\n<answer>B</answer>"
)


def test_a_tool_mode_completion_scores_as_its_raw_text() -> None:
    (reward,) = trl_reward_funcs()
    direct = score(RAW, "B", "mcq")
    assert direct.total == 2.8 and direct.tool_responses == 1 and direct.call_attempts == 1
    out = reward(prompts=["q"], completions=[COMPLETION], answer=["B"], question_type=["mcq"])
    assert out == [direct.total]
    # reading `content` only (before tool mode was read) lost the think blocks and the call
    content_only = "\n".join(m["content"] for m in COMPLETION if m["role"] == "assistant")
    assert score(content_only, "B", "mcq", tool_responses=1).total == 1.6


def test_the_turn_is_rebuilt_in_the_models_order_and_tool_messages_are_counted() -> None:
    got = split_completion(COMPLETION)
    assert got.tool_responses == 1
    assert got.text == (
        f"<think>{THINK1}</think>\n"
        '<tool_call>{"name": "crop_video", "arguments": {"start_time": 8.0, "end_time": 14.0}}'
        f"</tool_call>\n<think>{THINK2}</think>\n<answer>B</answer>"
    )
    assert "8.0 seconds" not in got.text  # the tool's text is never the model's


def test_openai_style_string_arguments_and_flat_calls_are_read() -> None:
    turn = {
        "role": "assistant",
        "reasoning": "Two windows.",  # vLLM's name for the reasoning field
        "content": None,
        "tool_calls": [
            {
                "type": "function",
                "function": {"name": "crop_video", "arguments": '{"start_time": 1, "end_time": 5}'},
            },
            {"name": "crop_video", "arguments": {"start_time": 6, "end_time": 9}},
            {"type": "function", "function": {"name": "crop_video", "arguments": "start=1"}},
        ],
    }
    got = split_completion([turn])
    direct = score(got.text, "B", "mcq", tool_responses=0)
    assert direct.call_attempts == 3 and direct.invalid_calls == 1  # the non-JSON arguments
    assert got.text.startswith("<think>Two windows.</think>\n<tool_call>")
    assert '"arguments": {"start_time": 1, "end_time": 5}' in got.text


def test_plain_content_messages_and_strings_are_unchanged() -> None:
    text = "<think>x</think><answer>B</answer>"
    assert split_completion(text).text == text
    assert split_completion([{"role": "assistant", "content": text}]).text == text
    parts = [{"role": "assistant", "content": [{"type": "text", "text": text}]}]
    assert split_completion(parts).text == text


def test_a_completion_cut_inside_think_keeps_its_think_open() -> None:
    eos = 7
    cut = [{"role": "assistant", "reasoning_content": "I am still think", "content": ""}]
    raw = "<think>\nI am still think"
    # the released format rule scores an unfinished think (ours pays no format without an
    # answer, so both forms would score 0 and the difference would not show)
    released = RewardConfig.reference_paragrpo()
    (reward,) = trl_reward_funcs(released, eos_token_ids=[eos])
    kw = {"answer": ["B"], "question_type": ["mcq"]}
    got = reward(prompts=["q"], completions=[cut], completion_ids=[[3, 4, 5]], **kw)
    assert got == [score(raw, "B", "mcq", released).total]
    finished = reward(prompts=["q"], completions=[cut], completion_ids=[[3, 4, eos]], **kw)
    assert finished == [score(raw + "</think>", "B", "mcq", released).total] != got
    # without the end-of-turn ids the adapter cannot tell, and reads the think as closed
    (blind,) = trl_reward_funcs(released)
    assert blind(prompts=["q"], completions=[cut], completion_ids=[[3, 4, 5]], **kw) == finished
