"""Table 2's claims with their verdict rules, fixed before the run they judge (issue 32).

Every rule is written here, in code, and in words in `docs/reproduce_rules.md`; the commit that
adds or changes a rule must precede the run whose tables it judges (the tables print the last
commit of this file, its doc or the settings, and name any of them edited since: `registration`;
a rule changed after a run needs a new run). The rules judge
the `prior` task (the first registration) and the `prior_kept` task (the second, issue 45: the
same rules, reading the sampled held-out column where the run has one, `Context.sampled`) in
`JUDGED_TASKS`; the older tasks keep their exploratory claims (`reproduce/claims.py`).

Terms (per seed, every arm of a seed starting from that seed's SFT checkpoint):
- kappa of an RL arm: mean executed calls per training rollout over its last 5 steps;
- SFT's kappa under vanilla GRPO's settings: the lr-0 control's kappa over all its steps (the SFT
  policy rolled out as vanilla GRPO's first step would, every step on new prompts);
- format_ok: the share of training rollouts whose structural blocks all parse in ParaVT's format
  (`paravt.rewards.episode_structure`), the same measure for every arm; last 5 steps;
- leak: the share of rollouts with the tool prior's `<tool_code>` envelope or an untagged answer;
- held-out accuracy at the dense budget (K = 8, the analogue of the paper's 64 frames): 64
  held-out videos, per document, in the sampled column where the run has one (its per-document
  mean over the samples), else greedy (`Context.sampled`); a pooled paired gain is the mean over seeds x documents of
  the per-document difference, with its standard error (documents are the units; seeds pooled);
- "in most seeds": in at least `MOST` of the seeds (4 of 5, 3 of 3, 2 of 2).

A verdict is `shown` when the rule holds, `not shown` when it does not, `not run` when a row it
needs is missing.

One file because it is one pre-registration: every rule beside its thresholds, read (and
committed) as a whole. The claims are data: `CLAIMS`, one row per claim (its words, the paper's
number, the rule in words, the rows it needs and the judge that applies the rule), in table order.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from paravt.eval.reproduce.tables import Row, Summary, fmt

# `prior` under the first registration (2126b3f); `prior_kept` under the second (issue 45), which
# adds the held-out column rule of `Context.sampled`
JUDGED_TASKS = ("prior", "prior_kept")
MOST = 0.8  # "most seeds": at least ceil(MOST * seeds)
Z = 2.0  # a pooled paired gain counts when it is at least this many standard errors
LEAK_MIN = 0.05  # the prior "leaks" when at least this share of rollouts shows it
COLLAPSE = 0.5  # vanilla's kappa below this fraction of SFT's
CONTROL_KEEPS = 0.8  # the lr-0 control's kappa at least this fraction of SFT's
KEPT = 0.1  # a kept tool: kappa above this ...
KEPT_RATIO = 2.0  # ... and above this many times vanilla's
SELECTIVE_RATIO = 2.0  # calls at the smallest budget at least this many times the dense budget's


@dataclass
class Verdict:
    id: str
    claim: str
    paper: str
    rule: str
    verdict: str  # shown / not shown / not run
    evidence: str


def most(n: int) -> int:
    return max(1, math.ceil(MOST * n - 1e-9))


def _ok(x: float | None) -> bool:
    return x is not None and not math.isnan(x)


def count(values: Sequence[bool | None]) -> tuple[int, int]:
    """(seeds where the per-seed test holds, seeds measured)."""
    measured = [v for v in values if v is not None]
    return sum(measured), len(measured)


def pooled_gain(
    a: Row, b: Row, k: int, *, sampled: bool = False
) -> tuple[float, float, int] | None:
    """Mean over seeds x documents of a's per-document accuracy minus b's at budget `k`, its
    standard error and the number of pairs; None without a seed measured for both. `sampled`:
    the per-document means of the sampled column (a document's samples are one unit)."""
    diffs: list[float] = []
    pa, pb = (a.sampled_per_doc, b.sampled_per_doc) if sampled else (a.per_doc, b.per_doc)
    for da, db in zip(pa.get(k, []), pb.get(k, [])):
        if da is None or db is None:
            continue
        diffs += [x - y for x, y in zip(da, db)]
    n = len(diffs)
    if n == 0:
        return None
    m = sum(diffs) / n
    if n < 2:
        return m, math.nan, n
    var = sum((d - m) ** 2 for d in diffs) / (n - 1)
    return m, math.sqrt(var / n), n


def _gain_text(g: tuple[float, float, int] | None) -> str:
    if g is None:
        return "-"
    m, se, n = g
    z = m / se if se and se > 0 else (math.inf if m > 0 else -math.inf if m < 0 else 0.0)
    return f"{m * 100:+.1f} ± {se * 100:.1f} points ({z:+.1f} SE, n = {n})"


def _gain_holds(g: tuple[float, float, int] | None) -> bool:
    if g is None:
        return False
    m, se, _ = g
    if m <= 0:
        return False
    return se == 0 or (not math.isnan(se) and m / se >= Z)


def _vals(xs: Sequence[float | None]) -> str:
    return ", ".join("-" if not _ok(x) else f"{x:.2f}" for x in xs)


def curve_mean(row: Row, key: str) -> list[float | None]:
    """Per seed, the mean of a training curve over all its steps (None without a value)."""
    out: list[float | None] = []
    for c in row.curves:
        xs = [x for x in c.get(key, []) if _ok(x)]
        out.append(sum(xs) / len(xs) if xs else None)
    return out


def sft_vanilla_kappa(control: Row) -> list[float | None]:
    """Per seed, the lr-0 control's kappa over all its training steps."""
    return curve_mean(control, "kappa")


def _zip_test(test: Callable[..., bool], *series: Sequence[float | None]) -> list[bool | None]:
    return [test(*vs) if all(_ok(v) for v in vs) else None for vs in zip(*series)]


@dataclass(frozen=True)
class Context:
    """What a rule reads besides the rows: the seeds, the budgets and the held-out column.

    `sampled` (the second registration, issue 45): every held-out number a rule reads (accuracy,
    its pooled paired gain, calls per question) comes from the sampled column when the run
    measured one (`eval_samples` > 0: that many episodes per question at the rollout
    temperature, a question's mean its unit), because greedy decoding answered every question
    alike in most arms of the first run; from the greedy column otherwise (the first registered
    run, which had none). Fixed by the run's settings before any cell, never chosen after."""

    n: int  # seeds
    need: str  # "in at least m of n seeds"
    dense: int  # the dense budget (the largest K)
    small: int  # the smallest budget
    sampled: bool = False

    @property
    def column(self) -> str:
        return "sampled" if self.sampled else "greedy"

    def accuracy(self, row: Row) -> dict[int, list[float | None]]:
        return row.sampled if self.sampled else row.accuracy

    def calls(self, row: Row) -> dict[int, list[float | None]]:
        return row.sampled_kappa if self.sampled else row.eval_kappa

    def gain(self, a: Row, b: Row) -> tuple[float, float, int] | None:
        """a's pooled paired gain over b at the dense budget, in this context's column."""
        return pooled_gain(a, b, self.dense, sampled=self.sampled)


Judged = tuple[str, str]  # (verdict, evidence)


@dataclass(frozen=True)
class Claim:
    """One claim. `claim` and `rule` are templates of the thresholds (`{Z:g}`, ...) and of the
    context (`{need}`, `{dense}`, `{small}`); `judge` gets the context and the rows named in `needs`,
    in that order (a row of `Summary.rows`, or "sequential" for `Summary.sequential`); a missing one
    makes the claim `not run`."""

    id: str
    claim: str
    paper: str
    rule: str
    needs: tuple[str, ...]
    judge: Callable[..., Judged]


THRESHOLDS = {  # what the rules' words may quote by name
    "Z": Z,
    "LEAK_MIN": LEAK_MIN,
    "COLLAPSE": COLLAPSE,
    "CONTROL_KEEPS": CONTROL_KEEPS,
    "KEPT": KEPT,
    "KEPT_RATIO": KEPT_RATIO,
    "SELECTIVE_RATIO": SELECTIVE_RATIO,
}


def _by_seeds(c: Context, tests: list[bool | None], ev: str, *more: list[bool | None]) -> Judged:
    """Shown when every per-seed test holds in most seeds; not run when the first measured none.
    With one test the evidence ends with its count (with more, `ev` gives the counts)."""
    (held, measured), *others = [count(t) for t in (tests, *more)]
    if measured == 0:
        return "not run", ev
    shown = all(h >= most(c.n) for h, _ in [(held, measured), *others])
    tail = "" if more else f"; holds in {held} of {measured} seeds"
    return "shown" if shown else "not shown", ev + tail


def _seeds(test: Callable[..., bool], field: str, ev: str) -> Callable[..., Judged]:
    """A judge of one field of the needed rows, seed by seed: `test(*values)` in most seeds; in
    `ev`, `{0}`, `{1}` are the needed rows' values in order."""

    def judge(c: Context, *rows: Row) -> Judged:
        series = [getattr(r, field) for r in rows]
        return _by_seeds(c, _zip_test(test, *series), ev.format(*map(_vals, series)))

    return judge


def _by_gain(g: tuple[float, float, int] | None, ev: str) -> Judged:
    return "not run" if g is None else "shown" if _gain_holds(g) else "not shown", ev


def _acc(c: Context, row: Row) -> str:
    return fmt(c.accuracy(row).get(c.dense, []), scale=100, digits=1)


def _fragility(c: Context, control: Row) -> Judged:
    leak, fmt_ok = curve_mean(control, "leak_rate"), curve_mean(control, "format_ok")
    ev = f"leak rate per seed {_vals(leak)}; format_ok {_vals(fmt_ok)}"
    return _by_seeds(c, _zip_test(lambda x: x >= LEAK_MIN, leak), ev)


def _sft_transfers(c: Context, base: Row, sft: Row) -> Judged:
    series = (base.kappa, sft.kappa, base.format_ok, sft.format_ok)
    tests = _zip_test(lambda bk, sk, bf, sf: sk > bk and sf > bf, *series)
    ev = f"kappa {fmt(base.kappa)} -> {fmt(sft.kappa)}; format_ok {fmt(base.format_ok)} -> {fmt(sft.format_ok)}"
    return _by_seeds(c, tests, ev)


def _collapse(c: Context, grpo: Row, control: Row) -> Judged:
    ref = sft_vanilla_kappa(control)
    falls = _zip_test(lambda g, r: g < COLLAPSE * r, grpo.kappa, ref)
    keeps = _zip_test(lambda k, r: k >= CONTROL_KEEPS * r, control.kappa, ref)
    (hf, mf), (hk, mk) = count(falls), count(keeps)
    ev = (
        f"SFT (vanilla settings) {_vals(ref)} -> GRPO {_vals(grpo.kappa)}, lr-0 control "
        f"{_vals(control.kappa)} per seed; collapse in {hf} of {mf}, control kept in {hk} of {mk}"
    )
    return _by_seeds(c, falls, ev, keeps)


def _kept_selective(c: Context, grpo: Row, para: Row) -> Judged:
    kept = _zip_test(lambda p, g: p > max(KEPT_RATIO * g, KEPT), para.kappa, grpo.kappa)
    at_small, at_dense = c.calls(para).get(c.small, []), c.calls(para).get(c.dense, [])
    selective = _zip_test(lambda s, d: s > KEPT and s >= SELECTIVE_RATIO * d, at_small, at_dense)
    (hk, mk), (hs, ms) = count(kept), count(selective)
    ev = (
        f"kappa PARA-GRPO {_vals(para.kappa)} vs GRPO {_vals(grpo.kappa)} (kept in {hk} of {mk}); "
        f"held-out calls ({c.column}) K = {c.small} {_vals(at_small)} vs K = {c.dense} {_vals(at_dense)} "
        f"(selective in {hs} of {ms})"
    )
    return _by_seeds(c, kept, ev, selective)


def _improves(c: Context, sft: Row, para: Row) -> Judged:
    p_acc, s_acc = c.accuracy(para).get(c.dense, []), c.accuracy(sft).get(c.dense, [])
    above = _zip_test(lambda p, q: p - q > 0, p_acc, s_acc)
    g = c.gain(para, sft)
    held, measured = count(above)
    shown = held == measured == c.n and _gain_holds(g)
    verdict = "not run" if not measured else "shown" if shown else "not shown"
    return verdict, (
        f"accuracy ({c.column}) {_acc(c, sft)} -> {_acc(c, para)}; above in {held} of {measured} "
        f"seeds; pooled {_gain_text(g)}"
    )


def _beats_grpo(c: Context, grpo: Row, para: Row) -> Judged:
    g = c.gain(para, grpo)
    ev = f"accuracy ({c.column}) GRPO {_acc(c, grpo)}, PARA-GRPO {_acc(c, para)}; pooled {_gain_text(g)}"
    return _by_gain(g, ev)


def _anchoring_drops(c: Context, anch: Row, control: Row) -> Judged:
    ref = sft_vanilla_kappa(control)
    ev = f"kappa SFT {_vals(ref)} -> + anchoring {_vals(anch.kappa)}"
    return _by_seeds(c, _zip_test(lambda a, r: a < COLLAPSE * r, anch.kappa, ref), ev)


def _together(c: Context, anch: Row, gate: Row, para: Row) -> Judged:
    ga, gg = c.gain(para, anch), c.gain(para, gate)
    shown = _gain_holds(ga) and _gain_holds(gg)
    verdict = "not run" if ga is None or gg is None else "shown" if shown else "not shown"
    return verdict, (
        f"({c.column}) over anchoring alone {_gain_text(ga)}; over gating alone {_gain_text(gg)}"
    )


def _gamma(c: Context, no_gamma: Row, para: Row) -> Judged:
    g = c.gain(para, no_gamma)
    ev = f"pooled ({c.column}) {_gain_text(g)}; kappa without gamma {_vals(no_gamma.kappa)}"
    return _by_gain(g, ev)


def _token_level(c: Context, seq_anch: Row, para: Row) -> Judged:
    tests = _zip_test(operator.ge, para.format_ok, seq_anch.format_ok)
    g = c.gain(para, seq_anch)
    ev = (
        f"format_ok token {_vals(para.format_ok)}, sequence {_vals(seq_anch.format_ok)}; "
        f"accuracy ({c.column}) K = {c.dense} pooled token - sequence {_gain_text(g)}"
    )
    return _by_seeds(c, tests, ev)


def _parallel(c: Context, seq: Row, para: Row) -> Judged:
    g = c.gain(para, seq)
    return _by_gain(g, f"pooled ({c.column}) {_gain_text(g)}")


# Claim(id, claim, paper, rule, needs, judge), in the order of the results table
# fmt: off
CLAIMS: tuple[Claim, ...] = (
    # block A: the cold start, vanilla GRPO and PARA-GRPO
    Claim("A0", "After the cold start the tool prior leaks under temperature (Format Fragility)",
          "f_tau 0.13 after SFT at tau 0.7",
          "the SFT policy under vanilla GRPO's settings (lr-0 control, all steps) leaks in at least {LEAK_MIN:.0%} of rollouts, {need}",
          ("grpo_lr0",), _fragility),
    Claim("A1", "The SFT cold start transfers the tool-call format",
          "kappa 0.45 -> 2.50",
          "SFT's kappa and format_ok above the untrained model's, {need} (rollouts under the PARA-GRPO arm's settings)",
          ("base", "sft"), _sft_transfers),
    Claim("A2", "Vanilla GRPO collapses tool calls (the Tool Necessity Gap)",
          "kappa 2.50 -> 0.02",
          "vanilla GRPO's kappa below {COLLAPSE:g}x SFT's (under its settings) {need}, while the "
          "lr-0 control stays at {CONTROL_KEEPS:g}x SFT's or more {need}",
          ("grpo", "grpo_lr0"), _collapse),
    Claim("A3", "PARA-GRPO keeps the tool in use where vanilla GRPO drops it, calling more where the overview shows less",
          "kappa 0.21 (PARA-GRPO) vs 0.02 (GRPO); selective",
          "PARA-GRPO's kappa above {KEPT_RATIO:g}x vanilla's and above {KEPT} {need}, and its held-out "
          "calls per question at K = {small} at least {SELECTIVE_RATIO:g}x those at K = {dense} and above "
          "{KEPT} {need}",
          ("grpo", "para_grpo"), _kept_selective),
    Claim("A4", "PARA-GRPO improves on the SFT cold start at the dense budget (K = {dense})",
          "above +SFT on every column",
          "PARA-GRPO minus SFT held-out accuracy at K = {dense} above 0 in every seed, and the pooled paired gain at least {Z:g} SE",
          ("sft", "para_grpo"), _improves),
    Claim("A5", "PARA-GRPO beats vanilla GRPO at the dense budget (K = {dense})",
          "62.1 vs 62.0, 69.4 vs 68.6, 39.8 vs 39.3, 65.0 vs 64.5",
          "the pooled paired gain of PARA-GRPO over vanilla GRPO at K = {dense} at least {Z:g} SE",
          ("grpo", "para_grpo"), _beats_grpo),
    Claim("A6", "PARA-GRPO holds the format better than vanilla GRPO",
          "f_tau 0.41 vs 0.13",
          "PARA-GRPO's format_ok above vanilla GRPO's {need}",
          ("para_grpo", "grpo"), _seeds(operator.gt, "format_ok", "format_ok GRPO {1}, PARA-GRPO {0}")),
    # block B: the ablations
    Claim("B1", "Exploration Anchoring alone holds the format",
          "f_tau 0.13 -> 0.35",
          "anchoring alone: format_ok above vanilla GRPO's {need}",
          ("anchoring_only", "grpo"), _seeds(operator.gt, "format_ok", "format_ok GRPO {1}, + anchoring {0}")),
    Claim("B2", "Exploration Anchoring alone does not keep the tool in use",
          "kappa 0.19 (from 2.50)",
          "anchoring alone: kappa below {COLLAPSE:g}x SFT's (under vanilla's settings) {need}",
          ("anchoring_only", "grpo_lr0"), _anchoring_drops),
    Claim("B3", "nFrames Gating alone keeps tools in use",
          "kappa 0.02 -> 1.36",
          "gating alone: kappa above {KEPT_RATIO:g}x vanilla GRPO's and above {KEPT} {need}",
          ("gating_only", "grpo"),
          _seeds(lambda a, g: a > max(KEPT_RATIO * g, KEPT), "kappa", "kappa GRPO {1}, + gating {0}")),
    Claim("B4", "nFrames Gating alone loses the format that PARA-GRPO holds",
          "f_tau 0.10 vs 0.41",
          "gating alone: format_ok below full PARA-GRPO's {need}",
          ("gating_only", "para_grpo"), _seeds(operator.lt, "format_ok", "format_ok + gating {0}, PARA-GRPO {1}")),
    Claim("B5", "Only anchoring and gating together win (accuracy at K = {dense})",
          "full PARA-GRPO best; each part alone below it",
          "the pooled paired gain of PARA-GRPO at K = {dense} over anchoring alone and over gating alone each at least {Z:g} SE",
          ("anchoring_only", "gating_only", "para_grpo"), _together),
    Claim("B6", "Removing R_tool lowers tool use",
          "kappa 0.21 -> 0.04",
          "without R_tool: kappa below full PARA-GRPO's {need}",
          ("no_tool_reward", "para_grpo"), _seeds(operator.lt, "kappa", "kappa PARA-GRPO {1}, without R_tool {0}")),
    Claim("B7", "Removing the penalty gamma lowers accuracy (K = {dense})",
          "65.0 -> 64.5 (MLVU); every column lower",
          "the pooled paired gain of PARA-GRPO over the arm without gamma at K = {dense} at least {Z:g} SE",
          ("no_gamma", "para_grpo"), _gamma),
    Claim("B8", "Token-level anchoring (the paper's form) holds the format at least as well as the reference's sequence-level scalar",
          "(ours: the paper describes the token form, the reference code applies a scalar)",
          "token-level format_ok at least the sequence-level arm's {need}",
          ("para_grpo_sequence", "para_grpo"), _token_level),
    # block C: parallel against sequential dispatch
    Claim("C1", "Parallel dispatch beats sequential at the same checkpoint (K = {dense})",
          "+0.7 to +2.3 points",
          "the pooled paired gain of parallel over sequential dispatch at K = {dense} at least {Z:g} SE",
          ("sequential", "para_grpo"), _parallel),
)
# fmt: on


def verdicts(s: Summary) -> list[Verdict]:
    n = len(s.seeds)
    sampled = bool(s.setup.get("eval_samples"))
    c = Context(n, f"in at least {most(n)} of {n} seeds", max(s.budgets), min(s.budgets), sampled)
    words = {**THRESHOLDS, "need": c.need, "dense": c.dense, "small": c.small}
    out: list[Verdict] = []
    for claim in CLAIMS:
        head = (claim.id, claim.claim.format(**words), claim.paper, claim.rule.format(**words))
        rows = [s.sequential if x == "sequential" else s.rows.get(x) for x in claim.needs]
        if any(r is None for r in rows):
            out.append(Verdict(*head, "not run", "a row it needs was not run"))
        else:
            out.append(Verdict(*head, *claim.judge(c, *rows)))
    return out


def render_results(s: Summary, *, rules_commit: str | None = None) -> list[str]:
    commit = rules_commit or "unknown (not run from a git checkout)"
    samples = s.setup.get("eval_samples")
    column = (
        f"the sampled column ({samples} episodes per question at temperature "
        f"{s.setup.get('eval_temperature', 0.7):g}, a question's mean its unit; greedy beside it "
        "in the tables, judging nothing)"
        if samples
        else "the greedy column (the run measured no sampled one)"
    )
    lines = [
        "## Results: the paper's claims, by rules fixed before this run",
        "",
        f"Each rule was committed before the run it judges (rules: `paravt.eval.reproduce.rules`; "
        "in words: docs/reproduce_rules.md; settings: `paravt.train.miniature` and the tiny "
        f"recipes; the last commit of any of them: {commit}). {len(s.seeds)} seeds; 'most "
        f"seeds' = at least {most(len(s.seeds))} of {len(s.seeds)}. Held-out accuracy, its "
        f"pooled paired gains and held-out calls are read from {column}.",
        "",
        "| | Claim | Paper | Rule | Miniature | Evidence |",
        "|---|---|---|---|---|---|",
    ]
    for v in verdicts(s):
        lines.append(
            f"| {v.id} | {v.claim} | {v.paper} | {v.rule} | **{v.verdict}** | {v.evidence} |"
        )
    return [*lines, ""]
