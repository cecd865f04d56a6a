"""The reference recipes, pinned on completions whose rewards were computed by hand.

PARA-GRPO preset (P): think 0.2, closed non-empty answer 0.3 + 0.2, think-before-tool 0.3,
balanced tags 0.1 (only when something was earned), capped at 1; plus 0.5 * R_anchor with
R_anchor = +0.4 (</think> after a substantive think) +0.3 (and a non-empty closed answer)
-0.3 (<think> never closed); R_fmt clamped to [0, 1]. Vanilla preset (V): think 0.3, answer
0.2 + 0.1, no anchoring. Both: R = R_acc + 1.0 * R_fmt + R_tool, R_tool = 0 / 0.1 / 0.3 (+0.5
if R_acc > 0). Every expected value below is worked out in its comment.
"""

from __future__ import annotations

import pytest

from paravt.rewards import RewardConfig, score

# The released reward exactly (`tool_credit="parseable"`, gamma 0): our presets pay the tool
# reward only for evidence (tests/test_evidence_credit.py), the reference constructors keep this.
P = RewardConfig.reference_paragrpo()
V = RewardConfig.reference_vanilla()
G = RewardConfig.reference_paragrpo(gamma=0.5)

T = "<think>I check the clip.</think>"  # a substantive (17-char) closed think
CALL = (
    '<tool_call>{"name": "crop_video", "arguments": {"start_time": 10, "end_time": 20}}</tool_call>'
)
CODE = "<tool_code>crop_video(start_time=1, end_time=9)</tool_code>"
BAD_JSON = "<tool_call>{name: crop_video}</tool_call>"
UNKNOWN = '<tool_call>{"name": "zoom", "arguments": {}}</tool_call>'
BAD_WINDOW = (
    '<tool_call>{"name": "crop_video", "arguments": {"start_time": 20, "end_time": 10}}</tool_call>'
)
RESP = "<tool_response>The red square appears at 12 s.</tool_response>"
OPTS = ["blue circle", "red square", "green star"]

# (id, config, completion, ground truth, question type, accuracy, format, tool, total)
TABLE = [
    # P: acc 1; base .2+.5+.1=.8; anchor .7*.5=.35 -> fmt 1; total 2
    ("think-answer-right", P, T + "<answer>B</answer>", "B", "mcq", 1, 1, 0, 2.0),
    # V: base .3+.3+.1 = .7
    ("think-answer-right-vanilla", V, T + "<answer>B</answer>", "B", "mcq", 1, 0.7, 0, 1.7),
    ("think-answer-wrong", P, T + "<answer>C</answer>", "B", "mcq", 0, 1, 0, 1.0),
    ("think-answer-wrong-vanilla", V, T + "<answer>C</answer>", "B", "mcq", 0, 0.7, 0, 0.7),
    # base .2+.5+.3+.1=1.1 -> 1; tool .1 + .5
    ("call-right", P, T + CALL + "<answer>B</answer>", "B", "mcq", 1, 1, 0.6, 2.6),
    # V: .3+.3+.3+.1 = 1.0
    ("call-right-vanilla", V, T + CALL + "<answer>B</answer>", "B", "mcq", 1, 1, 0.6, 2.6),
    # a tool response came back: tool .3 + .5
    ("call-response-right", P, T + CALL + RESP + "<answer>B</answer>", "B", "mcq", 1, 1, 0.8, 2.8),
    ("call-response-wrong", P, T + CALL + RESP + "<answer>C</answer>", "B", "mcq", 0, 1, 0.3, 1.3),
    ("call-wrong", P, T + CALL + "<answer>C</answer>", "B", "mcq", 0, 1, 0.1, 1.1),
    # V: acc 0, fmt 1.0, tool .3
    (
        "call-response-wrong-vanilla",
        V,
        T + CALL + RESP + "<answer>C</answer>",
        "B",
        "mcq",
        0,
        1,
        0.3,
        1.3,
    ),
    # think of 3 chars is not substantive: base .5+.1, no anchor
    ("short-think", P, "<think>hmm</think><answer>B</answer>", "B", "mcq", 1, 0.6, 0, 1.6),
    ("short-think-vanilla", V, "<think>hmm</think><answer>B</answer>", "B", "mcq", 1, 0.4, 0, 1.4),
    # empty answer earns no answer credit and no accuracy: base .2+.1, anchor .4*.5
    ("empty-answer", P, T + "<answer></answer>", "B", "mcq", 0, 0.5, 0, 0.5),
    ("empty-answer-vanilla", V, T + "<answer> </answer>", "B", "mcq", 0, 0.4, 0, 0.4),
    # unclosed think: base .2 (unbalanced), anchor -.3*.5 -> .05
    ("unclosed-think", P, "<think>I check the clip.", "B", "mcq", 0, 0.05, 0, 0.05),
    ("unclosed-think-vanilla", V, "<think>I check the clip.", "B", "mcq", 0, 0.3, 0, 0.3),
    # base 0, anchor -.15 -> clamped to 0
    ("unclosed-short-think", P, "<think>hi", "B", "mcq", 0, 0, 0, 0.0),
    # unclosed think, then a closed answer: base .2+.5 (unbalanced), anchor -.15 -> .55
    (
        "think-runs-into-answer",
        P,
        "<think>I check the clip.<answer>B</answer>",
        "B",
        "mcq",
        1,
        0.55,
        0,
        1.55,
    ),
    (
        "think-runs-into-answer-vanilla",
        V,
        "<think>I check the clip.<answer>B</answer>",
        "B",
        "mcq",
        1,
        0.6,
        0,
        1.6,
    ),
    # unclosed answer: no answer, no accuracy; base .2, anchor .4*.5
    ("unclosed-answer", P, T + "<answer>B", "B", "mcq", 0, 0.4, 0, 0.4),
    ("unclosed-answer-vanilla", V, T + "<answer>B", "B", "mcq", 0, 0.3, 0, 0.3),
    # no tags at all: the fallback grades the bare text; no format credit (balanced needs base>0)
    ("bare-letter", P, "B", "B", "mcq", 1, 0, 0, 1.0),
    # fallback after </think>: mcq accepts "The answer is B"; base .2+.1, anchor .2 -> .5
    ("fallback-after-think", P, T + "The answer is B", "B", "mcq", 1, 0.5, 0, 1.5),
    ("fallback-after-think-vanilla", V, T + "The answer is B", "B", "mcq", 1, 0.4, 0, 1.4),
    # reference guard: 5 x <|im_start|> in under 300 chars scores 0 throughout
    ("chat-spam", P, "<|im_start|>" * 5 + "<answer>B</answer>", "B", "mcq", 0, 0, 0, 0.0),
    # 4 is not spam: base .5+.1
    (
        "four-chat-tokens",
        P,
        "<|im_start|>" * 4 + "<answer>B</answer>",
        "B",
        "mcq",
        1,
        0.6,
        0,
        1.6,
    ),
    # tIoU [10,20] vs [15,25]: 5 / 15
    ("tiou-third", P, T + "<answer>[10, 20]</answer>", "[15, 25]", "tvg", 1 / 3, 1, 0, 4 / 3),
    (
        "tiou-third-vanilla",
        V,
        T + "<answer>[10, 20]</answer>",
        "[15, 25]",
        "tvg",
        1 / 3,
        0.7,
        0,
        0.7 + 1 / 3,
    ),
    ("tiou-clock", P, T + "<answer>[00:10, 00:20]</answer>", [10, 20], "tvg", 1, 1, 0, 2.0),
    ("tiou-reversed", P, T + "<answer>[20, 10]</answer>", "[10, 20]", "tvg", 1, 1, 0, 2.0),
    # F1 "red square" vs "red circle" (articles dropped): P = R = 1/2
    ("f1-half", P, T + "<answer>a red square</answer>", "the red circle", "oe", 0.5, 1, 0, 1.5),
    (
        "exact-after-normalisation",
        P,
        T + "<answer>The Red Square.</answer>",
        "red square",
        "oe",
        1,
        1,
        0,
        2.0,
    ),
    ("mcq-parenthesised", P, T + "<answer>(B)</answer>", "B", "mcq", 1, 1, 0, 2.0),
    ("mcq-dotted", P, T + "<answer>B.</answer>", "B", "mcq", 1, 1, 0, 2.0),
    ("mcq-option-word", P, T + "<answer>Option B</answer>", "B", "mcq", 1, 1, 0, 2.0),
    ("mcq-letter-j", P, T + "<answer>The answer is J</answer>", "J", "mcq", 1, 1, 0, 2.0),
    # invalid JSON is no parseable call: no tool reward, no think-before-tool; base .8 + .35
    ("bad-json-call", P, T + BAD_JSON + "<answer>B</answer>", "B", "mcq", 1, 1, 0, 2.0),
    # an unknown tool or a bad window is still a parseable call (reference), but penalised
    ("unknown-tool", P, T + UNKNOWN + "<answer>B</answer>", "B", "mcq", 1, 1, 0.6, 2.6),
    ("unknown-tool-gamma", G, T + UNKNOWN + "<answer>B</answer>", "B", "mcq", 1, 1, 0.6, 2.1),
    ("bad-window-gamma", G, T + BAD_WINDOW + "<answer>B</answer>", "B", "mcq", 1, 1, 0.6, 2.1),
    # 6 valid calls, cap 5: penalty 1/6 * 0.5
    (
        "over-cap-gamma",
        G,
        T + CALL * 6 + "<answer>B</answer>",
        "B",
        "mcq",
        1,
        1,
        0.6,
        2.6 - 0.5 / 6,
    ),
    ("leaked-tool-code", P, T + CODE + "<answer>B</answer>", "B", "mcq", 1, 1, 0.6, 2.6),
    # V: tool before think loses the .3 order bonus: .3+.3+.1
    ("call-before-think-vanilla", V, CALL + T + "<answer>B</answer>", "B", "mcq", 1, 0.7, 0.6, 2.3),
    # a tool response without a call earns nothing
    ("response-without-call", P, T + RESP + "<answer>B</answer>", "B", "mcq", 1, 1, 0, 2.0),
    # the last closed answer is graded
    ("two-answers", P, T + "<answer>A</answer><answer>B</answer>", "B", "mcq", 1, 1, 0, 2.0),
    ("empty-completion", P, "", "B", "mcq", 0, 0, 0, 0.0),
]


@pytest.mark.parametrize(
    ("config", "completion", "truth", "qtype", "acc", "fmt", "tool", "total"),
    [row[1:] for row in TABLE],
    ids=[row[0] for row in TABLE],
)
def test_reference_recipe_scores_match_the_hand_computed_table(
    config: RewardConfig,
    completion: str,
    truth: object,
    qtype: str,
    acc: float,
    fmt: float,
    tool: float,
    total: float,
) -> None:
    r = score(completion, truth, qtype, config)
    assert (r.accuracy, r.format, r.tool, r.total) == pytest.approx((acc, fmt, tool, total))


def test_the_table_pins_at_least_thirty_completions() -> None:
    assert len(TABLE) >= 30


def test_mcq_answers_may_name_an_option_by_its_text() -> None:
    r = score(T + "<answer>red square</answer>", "B", "mcq", P, options=OPTS)
    assert r.accuracy == 1.0


def test_think_prefix_in_the_prompt_is_restored_by_completion_prefix() -> None:
    cfg = RewardConfig.reference_paragrpo(completion_prefix="<think>\n")
    r = score("I check the clip.</think><answer>B</answer>", "B", "mcq", cfg)
    assert r.total == pytest.approx(2.0)


def test_penalty_reports_the_invalid_fraction_even_when_gamma_is_zero() -> None:
    r = score(T + CALL + BAD_JSON + "<answer>B</answer>", "B", "mcq", P)
    assert (r.call_attempts, r.invalid_calls, r.penalty) == (2, 1, 0.5)


def test_the_reference_constructors_are_the_released_form_and_one_override_from_the_presets() -> (
    None
):
    for ours, ref in (
        (RewardConfig.paragrpo(), RewardConfig.reference_paragrpo()),
        (RewardConfig.vanilla(), RewardConfig.reference_vanilla()),
    ):
        released = {
            "tool_credit": "parseable",
            "format_credit": "tags",
            "gamma": 0.0,
            "grounding_shortcut": True,
        }
        assert {k: getattr(ref, k) for k in released} == released
        assert ours.model_copy(update=released) == ref
        assert RewardConfig.preset("reference_" + ("paragrpo" if ref.answer_suffix else "vanilla"))
    assert RewardConfig() == RewardConfig.paragrpo()
    with pytest.raises(ValueError, match="unknown reward preset 'para'"):
        RewardConfig.preset("para")
