"""`paravt-train plot` draws overlaid curves of several runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from paravt.train.cli import main


def _run(path: Path, rewards: list[float]) -> Path:
    path.mkdir(parents=True)
    rows = [
        {"step": i + 1, "reward/total": r, "f_tau": r / 2, "kappa": 1.0, "accuracy": r / 3}
        for i, r in enumerate(rewards)
    ]
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_plot_overlays_runs_into_a_png(tmp_path: Path) -> None:
    a = _run(tmp_path / "paragrpo", [0.1, 0.3, 0.5])
    b = _run(tmp_path / "vanilla", [0.1, 0.1, 0.2])
    out = tmp_path / "cmp.png"
    assert main(["plot", str(a), str(b), "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 5000
    assert main(["plot", str(a)]) == 0 and (a / "curves.png").is_file()


def test_plot_names_a_directory_without_metrics(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"metrics\.jsonl"):
        main(["plot", str(tmp_path)])
