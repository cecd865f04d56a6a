"""The warning about steps without a learning signal says which case it sees: a policy whose
every rollout is right (converged on these prompts) is not reported as an untrained model."""

from __future__ import annotations

import pytest

from paravt.train.rl import NoSignalWatch


def warnings_of(
    caplog: pytest.LogCaptureFixture, steps: list[tuple[float, float | None]]
) -> list[str]:
    watch = NoSignalWatch(after=2)
    caplog.clear()
    with caplog.at_level("WARNING", logger="paravt.train"):
        for step, (frac, accuracy) in enumerate(steps, start=1):
            watch.observe(step, frac, accuracy)
    return [r.getMessage() for r in caplog.records]


def test_every_rollout_right_is_reported_as_converged_not_as_an_untrained_model(
    caplog: pytest.LogCaptureFixture,
) -> None:
    (line,) = warnings_of(caplog, [(0.5, 0.5), (1.0, 1.0), (1.0, 1.0)])
    assert line.startswith("steps 2-3: no learning signal")
    assert "Every rollout answered right (accuracy 1): the policy has converged" in line
    assert "untrained" not in line


def test_every_rollout_equally_wrong_names_an_untrained_model_or_a_reward_that_cannot_vary(
    caplog: pytest.LogCaptureFixture,
) -> None:
    (line,) = warnings_of(caplog, [(1.0, 0.0), (1.0, 0.0)])
    assert line.startswith("steps 1-2: no learning signal")
    assert "Every rollout was equally wrong (accuracy 0)" in line
    assert "untrained or random model" in line and "reward that cannot vary" in line
    assert "converged" not in line


def test_a_mixed_or_unknown_streak_names_both_causes(caplog: pytest.LogCaptureFixture) -> None:
    # all right, then all wrong within one streak; and no accuracy at all
    for steps in ([(1.0, 1.0), (1.0, 0.0)], [(1.0, 0.25), (1.0, 0.25)], [(1.0, None)] * 2):
        (line,) = warnings_of(caplog, steps)
        assert "converged on these prompts (every answer right)" in line, steps
        assert "untrained or random model" in line, steps
    # a streak broken by a step with signal starts its case over
    lines = warnings_of(caplog, [(1.0, 0.0), (0.5, 0.5), (1.0, 1.0), (1.0, 1.0)])
    assert len(lines) == 1 and lines[0].startswith("steps 3-4") and "answered right" in lines[0]


def test_uniform_groups_of_mixed_accuracy_name_rollouts_that_are_one_draw(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # some prompts right, others wrong, every group uniform: what a server given one seed for a
    # whole group produced (every rollout of a group the same draw)
    (line,) = warnings_of(caplog, [(1.0, 0.75), (1.0, 0.25)])
    assert "one draw repeated" in line and "same seed for every request of a group" in line
    (line,) = warnings_of(caplog, [(1.0, 1.0), (1.0, 0.25)])  # not mixed all along
    assert "one draw repeated" not in line
