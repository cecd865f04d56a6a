"""Issue 44: f_tau (the run's own format reward) can read high while every tool call is invalid.

`InvalidCallWatch` warns once per run when the reward rises while the invalid share of call
attempts rises; wherever f_tau is shown (progress bar, smoke summary, plot), format_ok and invalid
calls per episode stand beside it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from paravt.train.metrics import MetricsLogger
from paravt.train.miniature import Evaluation
from paravt.train.plot import PANELS, plot_runs
from paravt.train.recipe import AdvantageSpec, LoggingSpec
from paravt.train.rl import InvalidCallWatch, progress_bar
from paravt.train.smoke import summary_table


def _step(reward: float, invalid: float, attempts: float, format_ok: float) -> dict[str, float]:
    return {
        "reward/total": reward,
        "tool/invalid_calls": invalid,
        "tool/call_attempts": attempts,
        "format_ok": format_ok,
        "f_tau": 1.0,
        "kappa": attempts - invalid,
    }


def _run(
    caplog: pytest.LogCaptureFixture,
    rows: list[dict[str, float]],
    window: int = 8,
    rise: float = 0.1,
) -> tuple[list[int], list[str]]:
    watch = InvalidCallWatch(window, rise)
    caplog.clear()
    fired = []
    with caplog.at_level("WARNING", logger="paravt.train"):
        for step, row in enumerate(rows, start=1):
            if watch.observe(step, row):
                fired.append(step)
    return fired, [r.getMessage() for r in caplog.records]


def _hacking(n: int = 16) -> list[dict[str, float]]:
    """Reward rises from 1.0 to 2.5 while invalid calls grow from 0 to 3 of 3 attempts per
    episode and format_ok falls from 1.0 to 0.1 (the run that issue 44 describes)."""
    rows = []
    for i in range(n):
        t = i / (n - 1)
        rows.append(_step(1.0 + 1.5 * t, 3.0 * t, 3.0, 1.0 - 0.9 * t))
    return rows


def test_warns_once_with_the_numbers_when_reward_and_the_invalid_share_rise(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fired, lines = _run(caplog, _hacking())
    assert fired == [8]  # the first full window, and never again
    (line,) = lines
    assert line.startswith("steps 1-8: reward is being earned by invalid calls")
    # halves: steps 1-4 and 5-8 of the ramp (t = i / 15)
    assert "reward/total 1.150 -> 1.550" in line
    assert "invalid share of tool calls rose 0.10 -> 0.37" in line
    assert "invalid calls / episode 0.30 -> 1.10 of 3.00 -> 3.00 attempts" in line
    assert "format_ok 0.91 -> 0.67" in line
    assert "tool_credit='evidence', gamma>0" in line and "paragrpo preset" in line


def test_under_evidence_credit_the_warning_does_not_say_invalid_calls_earn_the_reward(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from paravt.rewards import RewardConfig

    watch = InvalidCallWatch(8, 0.1, RewardConfig.paragrpo())
    with caplog.at_level("WARNING", logger="paravt.train"):
        fired = [step for step, row in enumerate(_hacking(), start=1) if watch.observe(step, row)]
    assert fired == [8]
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith("steps 1-8: invalid calls rise with the reward, which pays them nothing")
    assert "being earned" not in line


def test_the_advice_fits_a_reward_that_already_charges_invalid_calls() -> None:
    """Under the presets the watch must not tell the user to switch to what they already run."""
    from paravt.rewards import RewardConfig
    from paravt.train.rl.watches import invalid_call_hint

    released = invalid_call_hint(RewardConfig.reference_paragrpo())
    assert "tool_credit='evidence', gamma>0" in released
    ours = invalid_call_hint(RewardConfig.paragrpo(penalty_unit="call", gamma=0.3))
    assert "already charges" in ours and "gamma=0.3" in ours and "penalty_unit='call'" in ours
    assert "paravt-train episodes" in ours and "paragrpo preset" not in ours


def test_is_quiet_when_reward_rises_with_the_invalid_share_flat_or_falling(
    caplog: pytest.LogCaptureFixture,
) -> None:
    flat = [_step(1.0 + 0.1 * i, 0.5, 2.0, 0.9) for i in range(16)]
    falling = [_step(1.0 + 0.1 * i, max(0.0, 2.0 - 0.2 * i), 2.0, 0.9) for i in range(16)]
    # noise: the invalid share jumps about by up to 0.08 around a flat level
    noisy = [_step(1.0 + 0.1 * i, 1.0 + (0.16 if i % 2 else -0.16), 2.0, 0.9) for i in range(16)]
    for rows in (flat, falling, noisy):
        assert _run(caplog, rows) == ([], [])


def test_is_quiet_without_calls_or_when_the_reward_does_not_rise(
    caplog: pytest.LogCaptureFixture,
) -> None:
    no_calls = [_step(1.0 + 0.1 * i, 0.0, 0.0, 1.0) for i in range(16)]
    assert _run(caplog, no_calls) == ([], [])
    falling_reward = [{**r, "reward/total": 3.0 - r["reward/total"]} for r in _hacking()]
    assert _run(caplog, falling_reward) == ([], [])
    # steps without a reward (no rollouts) are skipped, not averaged in as NaN
    gaps = [_step(math.nan, 0.0, 0.0, math.nan)] * 3
    assert _run(caplog, gaps + _hacking())[0] == [11]


def test_window_and_rise_are_settable_and_zero_never_warns(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert _run(caplog, _hacking(), window=0) == ([], [])
    assert _run(caplog, _hacking(), rise=0.9) == ([], [])  # the share rose 0.27 per window
    assert _run(caplog, _hacking(), window=4)[0] == [4]
    with pytest.raises(ValueError, match="at least 2"):
        InvalidCallWatch(window=1)
    spec = AdvantageSpec()
    assert (spec.invalid_call_warn_window, spec.invalid_call_warn_rise) == (8, 0.1)
    with pytest.raises(ValueError, match="invalid_call_warn_window"):
        AdvantageSpec(invalid_call_warn_window=1)


def test_the_watch_warns_on_rank_0_only(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    import paravt.train.rl.watches as watches

    monkeypatch.setattr(watches, "is_rank0", lambda: False)
    fired, lines = _run(caplog, _hacking())
    assert fired == [8] and lines == []  # every rank decides alike; only rank 0 speaks


def test_progress_bar_shows_format_ok_and_invalid_calls_beside_f_tau(tmp_path: Path) -> None:
    bar = progress_bar(_step(2.0, 1.5, 3.0, 0.25))
    assert list(bar) == ["reward", "f_tau", "format_ok", "invalid/ep", "kappa"]
    assert (bar["format_ok"], bar["invalid/ep"]) == (0.25, 1.5)

    logger = MetricsLogger(tmp_path, LoggingSpec(progress=True), rank=0, total=2)
    logger.log(1, {"reward/total": 2.0}, bar=bar)
    postfix = logger.bar.postfix
    logger.close()
    assert "f_tau=1, format_ok=0.25, invalid/ep=1.5" in postfix


def test_smoke_summary_puts_format_ok_and_invalid_calls_under_f_tau() -> None:
    def ev(format_ok: float, invalid: float) -> Evaluation:
        scores = {"accuracy": 0.5, "reward": 1.0, "tool_use": 1.0, "format": 1.0}
        return Evaluation(
            {"format_ok": format_ok, "tool/invalid_calls": invalid, "kappa": 1.0},
            {"p0": scores, "p1": scores},
        )

    table = summary_table(ev(0.1, 0.0), ev(1.0, 0.0), ev(0.05, 2.5))
    names = [line.split(" | ")[0].lstrip("| ") for line in table]
    i = names.index("f_tau (format reward)")
    assert names[i + 1 : i + 3] == [
        "format ok (share of rollouts whose blocks all parse)",
        "invalid tool calls / rollout",
    ]
    assert table[i + 1].endswith("blocks all parse) | 0.100 | 1.000 | 0.050 | |")
    assert table[i + 2] == "| invalid tool calls / rollout | 0.000 | 0.000 | 2.500 | |"
    assert "| main tokens generated / rollout | nan | nan | nan | |" in table


def test_plot_draws_format_ok_and_invalid_calls_beside_f_tau(tmp_path: Path) -> None:
    keys = [k for k, _ in PANELS]
    i = keys.index("f_tau")
    assert keys[i + 1 : i + 3] == ["format_ok", "tool/invalid_calls"]
    run = tmp_path / "run"
    run.mkdir()
    rows = [{"step": s, **_step(1.0 + s, s / 4, 1.0, 1.0 - s / 4)} for s in range(1, 4)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    png = plot_runs([run])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
