"""Guard: the RL update on 2 gloo ranks (FSDP2) with unequal work per rank computes the gradient
one process computes on the same global batch, parameter by parameter (dist_grad_driver.py).

A logged normaliser is not enough: the loss divided by the rank-local token count while the
logged normaliser stays global scales each rank's share of the gradient differently (rank 0 trains
79 tokens, rank 1 306) and is caught here, for the token-mean and the per-sequence aggregation."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

DRIVER = Path(__file__).parent / "dist_grad_driver.py"
AGGREGATIONS = ("token-mean", "seq-mean-token-mean")
BOUND_S = 240  # a hang (ranks out of step) fails instead of blocking the suite; 60 s collectives


def _env() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}


def _run(cmd: list[str]) -> None:
    done = subprocess.run(cmd, env=_env(), capture_output=True, timeout=BOUND_S)
    assert done.returncode == 0, done.stderr.decode()[-4000:]


@pytest.fixture(scope="module")
def runs(tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("grads")
    torchrun = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))
    model = str(tiny_model_path)
    _run([torchrun, "--standalone", "--nproc_per_node", "2", str(DRIVER), model, str(out)])
    _run([sys.executable, str(DRIVER), model, str(out), "--reference"])
    return out


def _load(out: Path, tag: str) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
    saved = torch.load(out / f"grads-{tag}.pt")
    return saved["grads"], saved["metrics"]


@pytest.mark.slow
@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_two_ranks_with_unequal_tokens_compute_the_one_process_gradient(
    runs: Path, aggregation: str
) -> None:
    ranks = [json.loads((runs / f"{aggregation}-ranks-rank{r}.json").read_text()) for r in (0, 1)]
    (ref_local,) = [json.loads((runs / f"{aggregation}-reference-rank0.json").read_text())]
    # the work really is unequal (else a rank-local normaliser would go unnoticed) ...
    assert ranks[0]["trained_tokens"] * 2 < ranks[1]["trained_tokens"]
    assert ranks[0]["sequences"] < ranks[1]["sequences"]
    # ... and together it is the reference's batch, with the same global normaliser logged
    assert ranks[0]["trained_tokens"] + ranks[1]["trained_tokens"] == ref_local["trained_tokens"]
    assert ranks[0]["normaliser"] == ranks[1]["normaliser"] == ref_local["normaliser"]

    got, got_metrics = _load(runs, f"{aggregation}-ranks")
    want, want_metrics = _load(runs, f"{aggregation}-reference")
    assert got.keys() == want.keys()
    scale = max(float(g.abs().max()) for g in want.values())
    assert scale > 0
    trained = [n for n, g in want.items() if g.abs().max() > 0]
    assert len(trained) > len(want) // 2, "most parameters should get a gradient"
    for name in want:
        torch.testing.assert_close(
            got[name], want[name], rtol=1e-4, atol=1e-5 * scale, msg=lambda m, n=name: f"{n}: {m}"
        )
    g = torch.cat([got[n].flatten() for n in want])
    w = torch.cat([want[n].flatten() for n in want])
    assert float((g - w).norm()) <= 1e-4 * float(w.norm())
    # the gradient norm the trainer reports is the same too
    assert got_metrics["grad_norm"] == pytest.approx(want_metrics["grad_norm"], rel=1e-4)
