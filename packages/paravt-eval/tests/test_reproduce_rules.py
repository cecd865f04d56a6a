"""The pre-registered verdict rules of `reproduce` (`paravt.eval.reproduce.rules`) on crafted
tables: each rule holds exactly where docs/reproduce_rules.md says, at its boundaries."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from paravt.eval.reproduce.registration import REGISTERED, registration
from paravt.eval.reproduce.rules import most, pooled_gain, render_results, verdicts
from paravt.eval.reproduce.tables import Row, Summary

DENSE, SMALL = 8, 2
SEEDS = 5


def _row(
    name: str,
    *,
    kappa: Sequence[float | None] = (),
    format_ok: Sequence[float | None] = (),
    leak: Sequence[float | None] = (),
    acc: Sequence[Sequence[float]] | None = None,  # per seed, per document, at every K
    eval_kappa: dict[int, Sequence[float]] | None = None,
    curves: Sequence[dict[str, list[float]]] = (),
) -> Row:
    r = Row(name, kappa=list(kappa), format_ok=list(format_ok), leak_rate=list(leak))
    if acc is not None:
        for k in (DENSE, SMALL):
            r.per_doc[k] = [list(d) for d in acc]
            r.accuracy[k] = [sum(d) / len(d) for d in acc]
    r.eval_kappa = {k: list(v) for k, v in (eval_kappa or {}).items()}
    r.curves = [dict(c) for c in curves]
    return r


def _verdict(rows: Sequence[Row], vid: str, *, sequential: Row | None = None) -> str:
    summary = Summary(
        seeds=list(range(SEEDS)),
        budgets=[DENSE, 4, SMALL],
        rows={r.model: r for r in rows},
        sequential=sequential,
        setup={},
    )
    found = [v for v in verdicts(summary) if v.id == vid]
    assert len(found) == 1
    return found[0].verdict


def _control(kappa_all_steps: float, settled: Sequence[float], leak: float = 0.1) -> Row:
    curves = [{"kappa": [kappa_all_steps] * 10, "leak_rate": [leak] * 10, "format_ok": [0.5] * 10}]
    return _row("grpo_lr0", kappa=list(settled), curves=curves * SEEDS)


def test_most_seeds_is_four_of_five_and_every_seed_of_two_or_three() -> None:
    assert [most(n) for n in (1, 2, 3, 4, 5, 10)] == [1, 2, 3, 4, 4, 8]


@pytest.mark.parametrize(
    ("grpo", "control", "expected"),
    [
        ([0.1] * 4 + [0.9], [1.0] * 5, "shown"),  # 4 of 5 seeds below half of SFT's 1.0
        ([0.1] * 3 + [0.9] * 2, [1.0] * 5, "not shown"),  # only 3 of 5
        ([0.49] * 5, [1.0] * 5, "shown"),  # boundary: below 0.5x
        ([0.5] * 5, [1.0] * 5, "not shown"),  # 0.5x is not below it
        ([0.1] * 5, [0.79] * 5, "not shown"),  # the control fell too: the collapse is not RL's
        ([0.1] * 5, [0.8] * 5, "shown"),  # boundary: the control at 0.8x keeps
    ],
)
def test_the_collapse_needs_most_seeds_and_a_control_that_keeps_calling(
    grpo: list[float], control: list[float], expected: str
) -> None:
    rows = [_row("grpo", kappa=grpo), _control(1.0, control)]
    assert _verdict(rows, "A2") == expected


def test_the_collapse_is_not_run_without_the_lr0_control() -> None:
    assert _verdict([_row("grpo", kappa=[0.0] * 5)], "A2") == "not run"


@pytest.mark.parametrize(
    ("para", "small", "dense", "expected"),
    [
        ([0.3] * 5, [0.6] * 5, [0.3] * 5, "shown"),  # kept (> 2x 0.02 and > 0.1), selective 2x
        ([0.3] * 5, [0.59] * 5, [0.3] * 5, "not shown"),  # calls at K=2 under 2x those at K=8
        ([0.3] * 5, [0.6] * 5, [0.0] * 5, "shown"),  # calls only where the overview misses
        ([0.3] * 5, [0.1] * 5, [0.0] * 5, "not shown"),  # too few calls anywhere to be selective
        ([0.1] * 5, [0.6] * 5, [0.3] * 5, "not shown"),  # kappa 0.1 is not above 0.1
        ([1.7] * 5, [1.9] * 5, [1.8] * 5, "not shown"),  # calls everywhere: not the paper's pattern
    ],
)
def test_the_paradox_claim_needs_kept_and_selective_calls(
    para: list[float], small: list[float], dense: list[float], expected: str
) -> None:
    rows = [
        _row("grpo", kappa=[0.02] * 5),
        _row("para_grpo", kappa=para, eval_kappa={SMALL: small, DENSE: dense}),
    ]
    assert _verdict(rows, "A3") == expected


def _docs(right: int, n: int = 8) -> list[float]:
    return [1.0] * right + [0.0] * (n - right)


def test_the_improvement_needs_every_seed_and_two_standard_errors() -> None:
    sft = _row("sft", acc=[_docs(4)] * 5)
    up = _row("para_grpo", acc=[_docs(7)] * 5)
    assert _verdict([sft, up], "A4") == "shown"
    one_seed_flat = _row("para_grpo", acc=[_docs(7)] * 4 + [_docs(4)])
    assert _verdict([sft, one_seed_flat], "A4") == "not shown"
    # above SFT in every seed by one document of eight: +12.5 points, but the pooled gain is
    # 0.125 with SE 0.053 (2.36 SE) -> shown; by one document in one seed only -> not shown
    tiny = _row("para_grpo", acc=[_docs(5)] * 5)
    gain = pooled_gain(tiny, sft, DENSE)
    assert gain is not None and gain[0] == pytest.approx(0.125) and gain[0] / gain[1] > 2
    assert _verdict([sft, tiny], "A4") == "shown"


def test_a_pooled_gain_below_two_standard_errors_is_not_shown() -> None:
    grpo = _row("grpo", acc=[_docs(4)] * 5)
    # one seed one document better: mean 1/40, SE about 1/40 -> 1 SE
    para = _row("para_grpo", acc=[_docs(5)] + [_docs(4)] * 4)
    assert _verdict([grpo, para], "A5") == "not shown"
    better = _row("para_grpo", acc=[_docs(8)] * 5)
    assert _verdict([grpo, better], "A5") == "shown"


def test_the_format_claims_use_the_common_measure_in_most_seeds() -> None:
    grpo = _row("grpo", format_ok=[0.5] * 5)
    anch = _row("anchoring_only", format_ok=[0.9] * 4 + [0.4])
    assert _verdict([grpo, anch], "B1") == "shown"
    anch = _row("anchoring_only", format_ok=[0.9] * 3 + [0.5] * 2)  # equal is not above
    assert _verdict([grpo, anch], "B1") == "not shown"
    para = _row("para_grpo", format_ok=[0.8] * 5)
    seq = _row("para_grpo_sequence", format_ok=[0.8] * 5)
    assert _verdict([para, seq], "B8") == "shown"  # at least as well: equal holds


def test_the_fragility_claim_reads_the_controls_leaks() -> None:
    assert _verdict([_control(1.0, [1.0] * 5, leak=0.0625)], "A0") == "shown"
    assert _verdict([_control(1.0, [1.0] * 5, leak=0.046875)], "A0") == "not shown"


def test_a_missing_seed_value_is_not_a_measurement() -> None:
    grpo = _row("grpo", kappa=[0.02, None, 0.02, 0.02, 0.02])
    gate = _row("gating_only", kappa=[1.0, 1.0, 1.0, 1.0, None])
    # 3 seeds measured for both, holding in 3: fewer than 4 of 5 seeds
    assert _verdict([grpo, gate], "B3") == "not shown"


def test_the_results_section_names_each_rule_and_its_commit() -> None:
    summary = Summary([0, 1], [DENSE, SMALL], {}, None, setup={})
    text = "\n".join(render_results(summary, rules_commit="abc1234 2026-11-26"))
    assert "of any of them: abc1234 2026-11-26" in text and "| A2 |" in text and "| C1 |" in text
    assert text.count("**not run**") == len(verdicts(summary))


def test_the_registration_is_the_last_commit_of_the_rules_their_words_or_the_settings(
    tmp_path: Path,
) -> None:
    """Editing a rule's words or a task's settings after the registration commit is flagged by
    name, as an edit of the rules module is; a commit of any of them is the new registration."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
            cwd=tmp_path,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()

    assert registration(tmp_path) is None  # not a checkout: the tables say "unknown"
    git("init", "-q")
    for path in REGISTERED:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("v1\n")
    (tmp_path / "README.md").write_text("v1\n")
    git("add", "-A")
    git("commit", "-qm", "registration")
    first = git("log", "-1", "--format=%h")
    assert registration(tmp_path).split()[0] == first  # type: ignore[union-attr]
    (tmp_path / "README.md").write_text("v2\n")  # not a registered file: no flag
    assert "uncommitted" not in registration(tmp_path)  # type: ignore[operator]
    doc, settings = "docs/reproduce_rules.md", REGISTERED[2]
    (tmp_path / doc).write_text("a looser margin\n")
    (tmp_path / settings).write_text("another needle\n")
    flagged = registration(tmp_path)
    assert flagged is not None and flagged.startswith(first)
    assert f"uncommitted changes to {doc}, {settings}: these verdicts are not" in flagged
    git("commit", "-qam", "new rules")
    second = registration(tmp_path)
    assert second is not None and second.split()[0] != first and "uncommitted" not in second


def _sampled(row: Row, per_doc: Sequence[Sequence[float]], calls: dict[int, float]) -> Row:
    """`row` with a sampled column: per seed, per-question means, at every K; calls per K."""
    for k in (DENSE, SMALL):
        row.sampled_per_doc[k] = [list(d) for d in per_doc]
        row.sampled[k] = [sum(d) / len(d) for d in per_doc]
        row.sampled_kappa[k] = [calls[k]] * len(per_doc)
    return row


def _summary(rows: Sequence[Row], eval_samples: int) -> Summary:
    return Summary(
        seeds=list(range(SEEDS)),
        budgets=[DENSE, 4, SMALL],
        rows={r.model: r for r in rows},
        sequential=None,
        setup={"eval_samples": eval_samples, "eval_temperature": 0.7},
    )


def test_the_second_registration_reads_the_sampled_column_when_the_run_measured_one() -> None:
    """Greedy ties (every arm right on the same documents) and a sampled gain: with samples the
    accuracy rules and A3's held-out calls read the sampled column and say so; without, greedy."""
    tie = [_docs(4)] * 5
    sft = _sampled(_row("sft", acc=tie), [[0.25] * 8] * 5, {DENSE: 0.0, SMALL: 0.0})
    para = _sampled(
        _row(
            "para_grpo", kappa=[0.5] * 5, acc=tie, eval_kappa={SMALL: [0.0] * 5, DENSE: [0.0] * 5}
        ),
        [[0.75] * 8] * 5,
        {DENSE: 0.2, SMALL: 0.9},
    )
    grpo = _row("grpo", kappa=[0.02] * 5, acc=tie)
    grpo = _sampled(grpo, [[0.25] * 8] * 5, {DENSE: 0.0, SMALL: 0.0})
    rows = [sft, para, grpo]

    def judged(samples: int) -> dict[str, tuple[str, str]]:
        return {v.id: (v.verdict, v.evidence) for v in verdicts(_summary(rows, samples))}

    sampled, greedy = judged(4), judged(0)
    for vid in ("A3", "A4", "A5"):
        assert sampled[vid][0] == "shown" and "(sampled)" in sampled[vid][1], sampled[vid]
        assert greedy[vid][0] == "not shown" and "(greedy)" in greedy[vid][1], greedy[vid]
    text = "\n".join(render_results(_summary(rows, 4), rules_commit="abc"))
    assert "read from the sampled column (4 episodes per question at temperature 0.7" in text
    assert "read from the greedy column" in "\n".join(render_results(_summary(rows, 0)))
