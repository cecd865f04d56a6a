from __future__ import annotations

import pytest

from paravt.core import parse_response
from paravt.rewards import (
    RewardConfig,
    anchor_token_parts,
    anchor_token_rewards,
    score,
    structural_token_positions,
)
from paravt.rewards.anchoring import shift_offsets

CALL = (
    '<tool_call>{"name": "crop_video", "arguments": {"start_time": 1, "end_time": 9}}</tool_call>'
)


TAGS = ("<think>", "</think>", "<answer>", "</answer>", "<tool_call>", "</tool_call>")


def tokenize(text: str, tags: tuple[str, ...] = TAGS) -> tuple[list[str], list[tuple[int, int]]]:
    """Tags are single tokens; everything else one token per 4 characters."""
    tokens, offsets, i = [], [], 0
    while i < len(text):
        tag = next((t for t in tags if text.startswith(t, i)), None)
        end = i + len(tag) if tag else min(len(text), i + 4)
        if not tag:
            nxt = [text.find(t, i) for t in tags]
            nxt = [p for p in nxt if p != -1]
            end = min([end, *nxt])
        tokens.append(text[i:end])
        offsets.append((i, end))
        i = end
    return tokens, offsets


def test_anchor_credit_lands_only_on_structural_tokens() -> None:
    text = "<think>I check the clip.</think>" + CALL + "<answer>B</answer>"
    tokens, offsets = tokenize(text)
    vec = anchor_token_rewards(parse_response(text), offsets, lambda_anchor=0.5)
    credited = {tokens[i]: v for i, v in enumerate(vec) if v}
    # closure 0.4*0.5 on </think>; flow 0.3*0.5 split over </think>, <answer>, </answer>
    assert credited == pytest.approx({"</think>": 0.2 + 0.05, "<answer>": 0.05, "</answer>": 0.05})
    body_start = text.index("<tool_call>") + len("<tool_call>")
    body_end = text.index("</tool_call>")
    call_tokens = [i for i, (s, e) in enumerate(offsets) if s >= body_start and e <= body_end]
    assert len(call_tokens) > 10 and all(vec[i] == 0 for i in call_tokens)


def test_the_vector_sums_to_the_sequence_level_anchor() -> None:
    text = "<think>I check the clip.</think><answer>B</answer>"
    _, offsets = tokenize(text)
    r = score(text, "B", "mcq", RewardConfig.paragrpo(anchoring="token"), token_offsets=offsets)
    assert r.token_rewards is not None
    assert sum(r.token_rewards) == pytest.approx(0.5 * 0.7)


def test_token_form_leaves_the_anchor_out_of_the_scalar_format_reward() -> None:
    text = "<think>I check the clip.</think><answer></answer>"
    # the released format arithmetic (our presets pay no format to an empty answer block)
    seq = score(text, "B", "mcq", RewardConfig.reference_paragrpo())
    tok = score(text, "B", "mcq", RewardConfig.reference_paragrpo(anchoring="token"))
    assert seq.format == pytest.approx(0.3 + 0.2)
    assert tok.format == pytest.approx(0.3)


def test_an_unclosed_think_that_runs_to_the_end_is_charged_on_the_last_token() -> None:
    text = "<think>I check the clip and keep going"
    _, offsets = tokenize(text)
    vec = anchor_token_rewards(parse_response(text), offsets, lambda_anchor=0.5)
    assert vec[-1] == pytest.approx(-0.15)
    assert all(v == 0 for v in vec[:-1])


def test_a_think_skipped_after_the_prefix_is_charged_on_the_answer_that_skipped_it() -> None:
    """The think prefix's `<think>\n` sits in the prompt; a policy that answers at once
    (`<answer>blue</answer>`, the think never closed) made its mistake on `<answer>`, where
    `</think>` was due. Both the unclosed-think part and the format-issue part land there, not on
    the last token (where they sat before, leaving `<answer>` its outcome credit)."""
    text = "<think>\n<answer>blue</answer>"
    tokens, offsets = tokenize(text[len("<think>\n") :])
    shifted = shift_offsets(offsets, len("<think>\n"))
    parts = anchor_token_parts(parse_response(text), shifted, lambda_anchor=0.5, format_issues=True)
    on = {p.name: [tokens[i] for i in p.tokens] for p in parts}
    assert on == {"unclosed_think": ["<answer>"], "format_issues": ["<answer>"]}
    # with think text before the early answer, the charge is still where the close was due
    text = "<think>\nI check the clip.<answer>blue</answer>"
    tokens, offsets = tokenize(text[len("<think>\n") :])
    shifted = shift_offsets(offsets, len("<think>\n"))
    parts = anchor_token_parts(parse_response(text), shifted, lambda_anchor=0.5, format_issues=True)
    assert {p.name: [tokens[i] for i in p.tokens] for p in parts} == {
        "unclosed_think": ["<answer>"],
        "format_issues": ["<answer>"],
    }


def test_a_structure_that_does_not_parse_keeps_its_token_charges_not_its_credit() -> None:
    """Our presets pay no format (and, in the token form, no anchor credit) to a structure that
    does not parse; its charges stay, on the token that broke it."""
    config = RewardConfig.paragrpo(anchoring="token", completion_prefix="<think>\n")
    completion = "<answer>B</answer>"
    tokens, offsets = tokenize(completion)
    r = score(completion, "B", "mcq", config, token_offsets=offsets)
    assert "format_not_parsed" in r.flags and r.format == 0.0
    assert r.token_rewards is not None
    assert r.token_rewards[tokens.index("<answer>")] == pytest.approx(-0.15)
    assert sum(r.token_rewards) == pytest.approx(-0.15)


def test_a_tag_outside_the_completion_tokens_puts_its_credit_on_the_last_token() -> None:
    # the <think> of the think prefix sits in the prompt: offsets start after it
    text = "<think>\nI check the clip and keep going"
    _, offsets = tokenize(text[len("<think>") :])
    shifted = [(s + 7, e + 7) for s, e in offsets]
    vec = anchor_token_rewards(parse_response(text), shifted, lambda_anchor=0.5)
    assert vec[-1] == pytest.approx(-0.15) and sum(vec) == pytest.approx(-0.15)


def test_structural_positions_cover_every_tag_including_tool_call_brackets() -> None:
    text = "<think>I check the clip.</think>" + CALL + "<answer>B</answer>"
    tokens, offsets = tokenize(text)
    positions = structural_token_positions(parse_response(text), offsets)
    assert [tokens[i] for i in positions] == [
        "<think>",
        "</think>",
        "<tool_call>",
        "</tool_call>",
        "<answer>",
        "</answer>",
    ]


def test_tokens_that_straddle_a_tag_are_counted_as_structural() -> None:
    text = "<think>abc</think>"
    offsets = [(0, 9), (9, 18)]  # "<think>ab", "c</think>"
    assert structural_token_positions(parse_response(text), offsets) == [0, 1]


def test_sequence_form_with_offsets_returns_a_zero_vector() -> None:
    text = "<think>I check the clip.</think><answer>B</answer>"
    _, offsets = tokenize(text)
    r = score(text, "B", "mcq", RewardConfig.paragrpo(), token_offsets=offsets)
    assert r.token_rewards == [0.0] * len(offsets)


def test_tool_call_boundaries_are_anchored_only_when_asked() -> None:
    text = "<think>I check the clip.</think>" + CALL
    tokens, offsets = tokenize(text)
    parsed = parse_response(text)
    plain = anchor_token_rewards(parsed, offsets, lambda_anchor=0.5)
    with_calls = anchor_token_rewards(parsed, offsets, lambda_anchor=0.5, tool_calls=True)
    extra = {tokens[i]: b - a for i, (a, b) in enumerate(zip(plain, with_calls)) if b != a}
    # +0.3 * 0.5 split over the well-formed call's two tags; its JSON body gets nothing
    assert extra == pytest.approx({"<tool_call>": 0.075, "</tool_call>": 0.075})
    assert sum(with_calls) - sum(plain) == pytest.approx(0.15)


def test_a_broken_or_prior_style_call_is_penalised_on_its_tags() -> None:
    broken = '<think>I check the clip.</think><tool_call>{"name": "crop_video", </tool_call>'
    tokens, offsets = tokenize(broken)
    vec = anchor_token_rewards(parse_response(broken), offsets, lambda_anchor=0.5, tool_calls=True)
    on_tags = {
        tokens[i]: v for i, v in enumerate(vec) if tokens[i] in ("<tool_call>", "</tool_call>")
    }
    assert on_tags == pytest.approx({"<tool_call>": -0.075, "</tool_call>": -0.075})
    # the prior's <tool_code> envelope runs in the reference parser but is not ParaVT's format
    leaked = "<think>I check the clip.</think><tool_code>crop_video(1, 9)</tool_code>"
    tokens, offsets = tokenize(leaked, (*TAGS, "<tool_code>", "</tool_code>"))
    vec = anchor_token_rewards(parse_response(leaked), offsets, lambda_anchor=0.5, tool_calls=True)
    on_tags = {tokens[i]: v for i, v in enumerate(vec) if "tool_code" in tokens[i]}
    assert on_tags == pytest.approx({"<tool_code>": -0.075, "</tool_code>": -0.075})


def test_score_passes_the_tool_call_option_through_in_the_token_form() -> None:
    text = "<think>I check the clip.</think>" + CALL
    _, offsets = tokenize(text)
    # a turn that calls and has no answer yet: the released format rule scores its tags
    config = RewardConfig.reference_paragrpo(anchoring="token", anchor_tool_calls=True)
    r = score(text, "B", "mcq", config, token_offsets=offsets, tool_responses=1)
    base = score(
        text,
        "B",
        "mcq",
        RewardConfig.reference_paragrpo(anchoring="token"),
        token_offsets=offsets,
        tool_responses=1,
    )
    assert r.token_rewards is not None and base.token_rewards is not None
    assert sum(r.token_rewards) - sum(base.token_rewards) == pytest.approx(0.15)
    assert r.total == base.total  # the scalar reward does not change
