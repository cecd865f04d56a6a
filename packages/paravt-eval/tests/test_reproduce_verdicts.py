"""`paravt-eval reproduce`'s results section on crafted tables: each verdict (shown / mixed /
not shown / not run) and the boundaries between them, as `reproduce/claims.py` states them.

Differences are paired by seed. shown: the claimed sign in every seed (a zero difference is not
the claimed sign); not shown: the mean difference has the other sign or is zero; mixed: otherwise.
The tool-collapse claim needs, besides a drop in every seed, GRPO's kappa below half of SFT's in
every seed. The "together win" claim is shown against every rival, not shown against every rival,
mixed otherwise. Values are binary fractions so every difference is exact."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from paravt.eval.reproduce.claims import render_results, verdicts
from paravt.eval.reproduce.tables import Row, Summary

IMPROVES = "PARA-GRPO improves on the SFT cold start (held-out accuracy, avg over K)"
COLLAPSE = "Vanilla GRPO collapses tool calls (the Tool Necessity Gap)"
TOGETHER = "Only anchoring and gating together win (held-out accuracy, avg over K)"
GATING = "nFrames Gating keeps tools in use"
BUDGETS = (2, 4)


def _row(
    name: str,
    *,
    acc: Sequence[float | None] = (),
    kappa: Sequence[float | None] = (),
    f_tau: Sequence[float | None] = (),
) -> Row:
    # the same accuracy at every K, so the average over K is the value itself
    return Row(
        name,
        f_tau=list(f_tau),
        kappa=list(kappa),
        accuracy={k: list(acc) for k in BUDGETS} if acc else {},
    )


def _verdict(rows: Sequence[Row], claim: str) -> str:
    summary = Summary(
        seeds=list(range(3)),
        budgets=list(BUDGETS),
        rows={r.model: r for r in rows},
        sequential=None,
        setup={},
    )
    found = [v.verdict for v in verdicts(summary) if v.claim == claim]
    assert len(found) == 1, [v.claim for v in verdicts(summary)]
    return found[0]


@pytest.mark.parametrize(
    ("diffs", "expected"),
    [
        ([0.25, 0.25, 0.125], "shown"),  # the claimed sign in every seed
        ([0.25, 0.25, 0.0], "mixed"),  # boundary: a zero seed is not the claimed sign
        ([0.5, -0.25, -0.125], "mixed"),  # one seed against, mean still above zero (+1/24)
        ([0.25, -0.25, 0.0], "not shown"),  # boundary: mean exactly zero
        ([0.25, -0.5, 0.125], "not shown"),  # mean of the other sign
        ([0.0, 0.0, 0.0], "not shown"),  # no difference at all
        ([-0.25, -0.125, -0.25], "not shown"),
    ],
)
def test_a_sign_claim_is_shown_mixed_or_not_shown_by_its_per_seed_differences(
    diffs: list[float], expected: str
) -> None:
    sft = _row("sft", acc=[0.5, 0.5, 0.5], kappa=[1.0] * 3)
    para = _row("para_grpo", acc=[0.5 + d for d in diffs], kappa=[1.0] * 3)
    assert _verdict([sft, para], IMPROVES) == expected


def test_a_sign_claim_pairs_seeds_and_says_not_run_without_a_measured_pair() -> None:
    sft = _row("sft", acc=[0.5, 0.5, 0.5])
    # seed 1 is missing for PARA-GRPO: its -0.5 never enters, the two measured seeds agree
    para = _row("para_grpo", acc=[0.75, None, 0.625])
    assert _verdict([sft, para], IMPROVES) == "shown"
    # measured, that seed's -0.5 turns the mean negative
    assert _verdict([sft, _row("para_grpo", acc=[0.75, 0.0, 0.625])], IMPROVES) == "not shown"
    # nothing measured in any seed pair
    none = _row("para_grpo", acc=[None, None, None])
    assert _verdict([sft, none], IMPROVES) == "not run"


@pytest.mark.parametrize(
    ("grpo_kappa", "expected"),
    [
        ([0.5, 0.25, 0.0], "shown"),  # a drop below half of SFT's (2.0) in every seed
        ([0.5, 0.25, 1.0], "mixed"),  # boundary: exactly half in one seed is not below half
        ([1.5, 1.5, 1.5], "mixed"),  # lower in every seed, but no collapse
        ([3.0, 0.5, 0.25], "mixed"),  # up in one seed, down on average
        ([2.0, 2.0, 2.0], "not shown"),  # boundary: no change
        ([3.0, 1.0, 2.0], "not shown"),  # mean change exactly zero
        ([2.5, 2.25, 2.5], "not shown"),  # tool calls rose
    ],
)
def test_the_collapse_claim_needs_a_drop_below_half_of_sft_in_every_seed(
    grpo_kappa: list[float], expected: str
) -> None:
    sft = _row("sft", kappa=[2.0, 2.0, 2.0], acc=[0.5] * 3)
    grpo = _row("grpo", kappa=grpo_kappa, acc=[0.5] * 3)
    assert _verdict([sft, grpo], COLLAPSE) == expected


def test_a_component_claim_compares_the_arm_with_grpo_in_the_claimed_direction() -> None:
    grpo = _row("grpo", kappa=[0.25, 0.25, 0.25])
    assert _verdict([grpo, _row("gating_only", kappa=[1.0, 0.5, 0.5])], GATING) == "shown"
    assert _verdict([grpo, _row("gating_only", kappa=[1.0, 0.25, 0.5])], GATING) == "mixed"
    assert _verdict([grpo, _row("gating_only", kappa=[0.0, 0.25, 0.5])], GATING) == "not shown"


# PARA-GRPO at 0.5 in every seed; each rival's accuracies make its own comparison shown /
# mixed / not shown
RIVAL = {
    "shown": [0.25, 0.25, 0.25],
    "mixed": [0.25, 0.5, 0.25],
    "not shown": [0.75, 0.5, 0.5],
}


@pytest.mark.parametrize(
    ("grpo", "anchoring", "gating", "expected"),
    [
        ("shown", "shown", "shown", "shown"),
        ("shown", "shown", "mixed", "mixed"),  # boundary: one rival not beaten in every seed
        ("shown", "not shown", "shown", "mixed"),
        ("not shown", "not shown", "not shown", "not shown"),
        ("not shown", "not shown", "mixed", "mixed"),  # boundary: one rival beaten on average
    ],
)
def test_together_win_is_shown_only_against_every_rival(
    grpo: str, anchoring: str, gating: str, expected: str
) -> None:
    rows = [
        _row("para_grpo", acc=[0.5, 0.5, 0.5]),
        _row("grpo", acc=RIVAL[grpo]),
        _row("anchoring_only", acc=RIVAL[anchoring]),
        _row("gating_only", acc=RIVAL[gating]),
    ]
    assert _verdict(rows, TOGETHER) == expected


def test_together_win_compares_only_the_rivals_that_were_run() -> None:
    para = _row("para_grpo", acc=[0.5, 0.5, 0.5])
    assert _verdict([para, _row("grpo", acc=RIVAL["shown"])], TOGETHER) == "shown"
    assert _verdict([para, _row("grpo", acc=RIVAL["not shown"])], TOGETHER) == "not shown"
    summary = Summary([0, 1, 2], list(BUDGETS), {"para_grpo": para}, None, setup={})
    assert TOGETHER not in [v.claim for v in verdicts(summary)]  # no rival: no claim


def test_the_results_section_prints_each_claims_verdict() -> None:
    rows = {
        "sft": _row("sft", acc=[0.5, 0.5, 0.5], kappa=[2.0, 2.0, 2.0]),
        "grpo": _row("grpo", acc=[0.5, 0.5, 0.5], kappa=[1.0, 0.5, 0.25]),  # half in seed 0
        "para_grpo": _row("para_grpo", acc=[0.75, 0.75, 0.5]),  # a zero seed: mixed
    }
    md = "\n".join(render_results(Summary([0, 1, 2], list(BUDGETS), rows, None, setup={})))
    assert f"| {COLLAPSE} | kappa 2.50 -> 0.02 | **mixed** |" in md
    assert f"| {IMPROVES} | +SFT+PARA-GRPO above +SFT on every column | **mixed** |" in md
    assert (
        f"| {TOGETHER} | PARA-GRPO best on every column; each part alone below it | **mixed** |"
        in md
    )
    assert "**shown**" not in md and "**not shown**" not in md


def test_a_missing_value_is_not_a_measurement() -> None:
    """A run without a logged curve has kappa NaN: it is left out like a missing seed, not read as
    a difference of unknown sign ("mixed")."""
    nan = float("nan")
    sft = _row("sft", acc=[0.5] * 3, kappa=[1.0] * 3)
    grpo = _row("grpo", acc=[0.5] * 3, kappa=[0.25, 0.25, nan])
    assert _verdict([sft, grpo], COLLAPSE) == _verdict(
        [sft, _row("grpo", acc=[0.5] * 3, kappa=[0.25, 0.25, None])], COLLAPSE
    )
    assert _verdict([sft, grpo], COLLAPSE) == "shown"


def test_together_win_without_any_measured_rival_is_not_run() -> None:
    para = _row("para_grpo", acc=[0.75, 0.75, None])
    rival = _row("grpo", acc=[None, None, 0.5])  # no seed measured beside PARA-GRPO
    assert _verdict([para, rival], TOGETHER) == "not run"
