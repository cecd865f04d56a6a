from __future__ import annotations

import pytest

from paravt.rewards import (
    extract_choice,
    mcq_accuracy,
    normalize_text,
    parse_window,
    temporal_iou,
    token_f1,
)


@pytest.mark.parametrize(
    "answer",
    [
        "B",
        "(B)",
        "B.",
        "B)",
        "b",
        "Option B",
        "option (B)",
        "The answer is B",
        "the answer is: (B)",
        "Answer: B",
        "B. red square",
        "(B) red square",
    ],
)
def test_multiple_choice_accepts_the_usual_ways_of_naming_a_letter(answer: str) -> None:
    assert extract_choice(answer) == "B"
    assert mcq_accuracy(answer, "B") == 1.0


def test_multiple_choice_letters_run_from_a_to_j() -> None:
    assert mcq_accuracy("J", "J") == 1.0
    assert extract_choice("K") is None


def test_an_option_text_names_its_letter_when_the_options_are_given() -> None:
    options = ["A. blue circle", "B. red square", "C. green star"]
    assert extract_choice("Red square", options) == "B"
    assert mcq_accuracy("red square", "B", options) == 1.0
    assert mcq_accuracy("green star", "B", {"A": "blue", "B": "red square", "C": "green star"}) == 0


def test_a_ground_truth_may_itself_be_an_option_text() -> None:
    assert mcq_accuracy("(C)", "green star", ["blue circle", "red square", "green star"]) == 1.0


def test_an_answer_naming_two_letters_is_not_credited() -> None:
    assert extract_choice("A or C") is None
    assert mcq_accuracy("A or B", "B") == 0.0


def test_a_wrong_letter_scores_zero() -> None:
    assert mcq_accuracy("The answer is C", "B") == 0.0


def test_normalisation_drops_case_articles_punctuation_and_spacing() -> None:
    assert normalize_text("  The Red,   square! ") == "red square"


def test_token_f1_counts_repeated_words_as_a_multiset() -> None:
    assert token_f1("red red blue", "red red") == pytest.approx(0.8)
    assert token_f1("", "red") == 0.0
    assert token_f1("green", "red") == 0.0


@pytest.mark.parametrize(
    ("text", "window"),
    [
        ("[10, 20]", (10.0, 20.0)),
        ("from 12.5 to 30 seconds", (12.5, 30.0)),
        ("[01:05, 80.5]", (65.0, 80.5)),
        ("00:01:00 - 00:01:30", (60.0, 90.0)),
        ("[20, 10]", (10.0, 20.0)),  # reversed pairs are swapped
        ("[5, 5]", None),
        ("no times here", None),
        ("only 12", None),
    ],
)
def test_windows_are_the_first_two_times_clock_or_seconds(
    text: str, window: tuple[float, float] | None
) -> None:
    assert parse_window(text) == window


def test_temporal_iou_is_intersection_over_union() -> None:
    assert temporal_iou("[10, 20]", "[15, 25]") == pytest.approx(1 / 3)
    assert temporal_iou("[0, 5]", "[10, 20]") == 0.0
    assert temporal_iou("[10, 20]", "[10, 20]") == 1.0
    assert temporal_iou("soon", "[10, 20]") == 0.0


def test_a_window_is_graded_by_its_overlap_not_by_its_digits() -> None:
    # normalisation drops punctuation: '[5.0, 12.0]' and '[50, 120]' both read '50 120'
    from paravt.rewards import RewardConfig, score

    think = "<think>I check the clip.</think>"
    wrong = think + "<answer>[50, 120]</answer>"  # no overlap with [5, 12]
    for preset in (RewardConfig.paragrpo(), RewardConfig.vanilla()):
        assert score(wrong, [5.0, 12.0], "tvg", preset).accuracy == 0.0
        assert (
            score(think + "<answer>[5, 12]</answer>", "[5.0, 12.0]", "tvg", preset).accuracy == 1.0
        )
        assert score(
            think + "<answer>[6.5, 12]</answer>", "[5.0, 12.0]", "tvg", preset
        ).accuracy == (pytest.approx(5.5 / 7))
    # the released form keeps the released code's shortcut (agreement), one override away
    assert score(wrong, [5.0, 12.0], "tvg", RewardConfig.reference_paragrpo()).accuracy == 1.0
    ours = RewardConfig.paragrpo(grounding_shortcut=True)
    assert score(wrong, [5.0, 12.0], "tvg", ours).accuracy == 1.0


def test_an_article_after_the_answer_is_not_option_a() -> None:
    # "a" in "the answer is a red car" is an article; the answer names option C by its text
    from paravt.rewards.accuracy import extract_choice, mcq_accuracy

    options = ["blue car", "green car", "a red car"]
    for said in ("The answer is a red car", "Answer: a red car.", "the answer is: a red car"):
        assert extract_choice(said, options) == "C", said
        assert mcq_accuracy(said, "C", options) == 1.0 and mcq_accuracy(said, "A", options) == 0.0
    assert extract_choice("The answer is a red car") is None  # no options: no letter named
    # a small letter still counts where it ends the answer
    for said, letter in (("the answer is b", "B"), ("Answer: (c).", "C"), ("option d", "D")):
        assert extract_choice(said, options) == letter, said
    assert extract_choice("The answer is B because it is blue", options) == "B"
