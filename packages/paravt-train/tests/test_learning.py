"""PARA-GRPO makes the tiny policy better, end to end: the proof that signs, masks, advantages,
sub-agent credit and the loss agree.

The task (`paravt.train.miniature`): a 16-second video shows one coloured square for 2 s; "What
colour is the square?". The overview (K = 2 or 4 frames, nFrames gating) usually misses it; two
parallel `crop_video` calls over the halves of the video always find it, and the sub-agents (the
same tiny model) say which colour. Half of the cold start's teacher traces answer from the overview
alone, so the SFT policy calls the tool on only some prompts. RL with the real runtime, real
`crop_video` on real mp4 files and real sub-agents must then raise the held-out reward without
lowering held-out accuracy.

The verdict is built to hold on any CPU (paravt-train's README has the measured distribution over
seeds, numerics and CPU kernels, and why these numbers): for each seed in `SEEDS` a cold start
and `RL_STEPS` PARA-GRPO steps; the held-out gains (after - before, paired by prompt, pooled over
the seeds' prompts) must clear an absolute margin and a number of standard errors, for accuracy and
for reward (`paravt.train.miniature.learned`: since 2026-12-03 the reward must rise by +0.26 and 6
standard errors and accuracy must not fall; a seed's accuracy gain is a draw of its cold start, so
that RL raises held-out accuracy is measured over 16 seeds per numeric in experiments/README.md,
not by two seeds here), and every seed must stay out of the invalid-call
hole (`format_held`: at most `INVALID_CALLS_MAX` invalid calls per held-out episode after RL,
format ok at most `FORMAT_OK_DROP_MAX` below the SFT policy's). Each run's line also prints, per
seed, invalid calls per episode, format ok and f_tau before and after. The recipe's setting (the
tiny recipes') is the one run 9 adopted: over 6 seeds in fp32 and in bf16 no cell fell into the
hole (experiments/README.md, "evidence_credit.py"). The
same runs with learning rate 0 and with the policy-gradient sign flipped run here too and must fail that verdict (the lr-0 run stays within `LR0_TOLERANCE` of the SFT scores); the inverted loss mask is a
third control (`PARAVT_LEARNING_CONTROLS=1`). `PARAVT_LEARNING_NUMERIC=bf16` runs the same
verdict in the GPU's numerics (bf16 compute over fp32 master weights) on the CPU; `nox -s tests`
runs fp32. Each seed is one process of
`experiments/learning_distribution.py` with one torch thread, whatever the machine's core count
(a measured setting), the seeds side by side.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from paravt.train.miniature import (
    ACCURACY_MARGIN,
    ACCURACY_Z,
    LEARNING_RL_STEPS,
    LEARNING_SEEDS,
    LEARNING_THREADS,
    LR0_TOLERANCE,
    NUMERICS,
    REWARD_MARGIN,
    REWARD_Z,
    Evaluation,
    PairedGain,
    format_held,
    learned,
    pooled_gain,
)

SEEDS = (
    tuple(int(s) for s in os.environ.get("PARAVT_LEARNING_SEEDS", "").split(",") if s)
    or LEARNING_SEEDS
)
RL_STEPS = int(os.environ.get("PARAVT_RL_STEPS", str(LEARNING_RL_STEPS)))
CONTROLS = os.environ.get("PARAVT_LEARNING_CONTROLS", "") == "1"
# fp32 in `nox -s tests`; `PARAVT_LEARNING_NUMERIC=bf16`: the GPU's numerics on the CPU
NUMERIC = os.environ.get("PARAVT_LEARNING_NUMERIC", "fp32")
if NUMERIC not in NUMERICS:
    raise ValueError(f"PARAVT_LEARNING_NUMERIC={NUMERIC!r}: use one of {sorted(NUMERICS)}")
CELL_SCRIPT = Path(__file__).resolve().parents[3] / "experiments" / "learning_distribution.py"
CELL_TIMEOUT_S = 3600


@pytest.fixture(scope="module")
def cells(tmp_path_factory: pytest.TempPathFactory, tiny_model_path: Path) -> dict[int, Any]:
    """One measured cell per seed, the seeds in parallel: each a process with one torch thread
    (`LEARNING_THREADS`), whatever the machine's core count, running the cold start, PARA-GRPO and
    the controls exactly as `experiments/learning_distribution.py` measured them."""
    root = tmp_path_factory.mktemp("learning")
    controls = ["lr0", "sign", *(["mask"] if CONTROLS else [])]
    env = {**os.environ, "OMP_NUM_THREADS": str(LEARNING_THREADS), "HF_HUB_OFFLINE": "1"}
    procs = {}
    for seed in SEEDS:
        cmd = [
            sys.executable,
            str(CELL_SCRIPT),
            f"--seed={seed}",
            f"--threads={LEARNING_THREADS}",
            f"--eval-at={RL_STEPS}",
            f"--numeric={NUMERIC}",
            "--controls",
            *controls,
            f"--out={root / f'seed{seed}.json'}",
        ]
        log = (root / f"seed{seed}.log").open("w")
        procs[seed] = (subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT), log)
    out: dict[int, Any] = {}
    for seed, (proc, log) in procs.items():
        try:
            code = proc.wait(timeout=CELL_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            for other, _ in procs.values():
                other.kill()
            code = -9
        log.close()
        tail = (root / f"seed{seed}.log").read_text()[-3000:]
        assert code == 0, f"the learning cell of seed {seed} failed (exit {code}):\n{tail}"
        out[seed] = json.loads((root / f"seed{seed}.json").read_text())
    return out


def pairs_of(cells: dict[int, Any], run: str) -> list[tuple[Evaluation, Evaluation]]:
    """Per seed, the SFT policy's held-out evaluation and `run`'s after `RL_STEPS`."""

    def ev(d: dict[str, Any]) -> Evaluation:
        return Evaluation(d["metrics"], d["per_prompt"])

    return [(ev(c["before"]), ev(c[run][str(RL_STEPS)])) for c in cells.values()]


def gains_of(cells: dict[int, Any], run: str) -> dict[str, PairedGain]:
    """`run`'s held-out gains after `RL_STEPS`, pooled over the seeds (printed as JSON)."""
    pairs = pairs_of(cells, run)
    gains = {k: pooled_gain(pairs, k) for k in ("accuracy", "reward", "tool_use")}
    shown = {
        "accuracy": "accuracy",
        "reward": "reward/total",
        "tool_use": "tool_use_rate",
        "invalid_calls": "tool/invalid_calls",
        "format_ok": "format_ok",
        "f_tau": "f_tau",
    }
    report = {
        "run": run,
        "steps": RL_STEPS,
        "capability": sorted({c["capability"] for c in cells.values()}),
        "per_seed": {
            seed: {k: [round(b.metrics[m], 3), round(a.metrics[m], 3)] for k, m in shown.items()}
            for seed, (b, a) in zip(cells, pairs)
        },
        "gains": {k: str(g) for k, g in gains.items()},
        "learned": learned(gains),
        "format_held": [format_held(b.metrics, a.metrics) for b, a in pairs],
    }
    print(json.dumps(report))
    return gains


@pytest.mark.slow
def test_para_grpo_raises_held_out_reward_and_keeps_accuracy(cells: dict[int, Any]) -> None:
    gains = gains_of(cells, "para_grpo")
    assert learned(gains), gains
    held = {
        seed: format_held(b.metrics, a.metrics)
        for seed, (b, a) in zip(cells, pairs_of(cells, "para_grpo"))
    }
    assert all(held.values()), f"in the invalid-call hole after RL (seed: held): {held}"


@pytest.mark.slow
def test_the_same_runs_with_learning_rate_zero_do_not_learn(cells: dict[int, Any]) -> None:
    gains = gains_of(cells, "lr0")
    assert not learned(gains), gains
    # No weight moves and the evaluation is seeded: the SFT policy's scores, in 8 of the 9 measured
    # fp32 cells exactly (in one, -0.016 accuracy: which requests the in-process engine batches
    # together can depend on timing; bf16 seed 0: +0.004), so well inside the tolerances.
    for key, tolerance in LR0_TOLERANCE.items():
        assert abs(gains[key].mean) < tolerance, gains


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sign", "mask"])
def test_a_sabotaged_trainer_does_not_learn(cells: dict[int, Any], kind: str) -> None:
    if kind == "mask" and not CONTROLS:
        pytest.skip("a third control (one more RL run per seed): PARAVT_LEARNING_CONTROLS=1")
    gains = gains_of(cells, kind)
    assert not learned(gains), (kind, gains)


def test_the_verdict_needs_both_margins_and_enough_standard_errors() -> None:
    def gain(key: str, mean: float, z: float) -> PairedGain:
        return PairedGain(key, mean, abs(mean) / z if z else 0.0, 64)

    acc, reward = ACCURACY_MARGIN, REWARD_MARGIN
    at_margins = {
        "accuracy": gain("accuracy", acc, ACCURACY_Z),
        "reward": gain("reward", reward, REWARD_Z),
    }
    assert learned(at_margins)
    clear = {
        "accuracy": gain("accuracy", 0.1, 4.0),
        "reward": gain("reward", 2 * reward, 2 * REWARD_Z),
    }
    assert learned(clear)
    # the reward: big enough and clear of its noise
    too_small = {**clear, "reward": gain("reward", 0.9 * reward, 10 * REWARD_Z)}
    too_noisy = {**clear, "reward": gain("reward", 2 * reward, 0.9 * REWARD_Z)}
    fell = {**clear, "reward": gain("reward", -2 * reward, 2 * REWARD_Z)}
    for gains in (too_small, too_noisy, fell):
        assert not learned(gains), gains
    # accuracy must not fall, however much the reward rose (a reward earned without answering better)
    assert ACCURACY_MARGIN >= 0 and ACCURACY_Z >= 0
    for mean, z in ((-0.01, 0.5), (-0.2, 5.0)):
        assert not learned({**clear, "accuracy": gain("accuracy", mean, z)})
    # nothing moved (the lr-0 control): not learning
    assert not learned(
        {"accuracy": PairedGain("accuracy", 0, 0, 64), "reward": PairedGain("reward", 0, 0, 64)}
    )
