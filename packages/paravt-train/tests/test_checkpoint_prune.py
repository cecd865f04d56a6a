"""Checkpoint rotation keeps the newest complete checkpoints and removes everything older,
including a checkpoint half deleted when a run was killed while rotating (seen in test_resume:
a SIGKILL inside the old checkpoint's removal left `step-000001` behind for good)."""

from __future__ import annotations

from pathlib import Path

from paravt.train.checkpoint import STATE_FILE, checkpoint_dirs, prune_checkpoints


def _step(root: Path, step: int, *, complete: bool = True) -> Path:
    d = root / "checkpoints" / f"step-{step:06d}"
    d.mkdir(parents=True)
    (d / "model.safetensors").write_bytes(b"x")
    if complete:
        (d / STATE_FILE).write_bytes(b"x")
    return d


def test_a_half_deleted_older_checkpoint_is_removed_and_the_newest_are_kept(
    tmp_path: Path,
) -> None:
    half = _step(tmp_path, 1, complete=False)  # its state file went first, then the kill
    for s in (2, 3, 4):
        _step(tmp_path, s)
    prune_checkpoints(tmp_path, keep_last=2, step=4)
    assert not half.exists()
    assert [s for s, _ in checkpoint_dirs(tmp_path)] == [3, 4]
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == [
        "step-000003",
        "step-000004",
    ]


def test_nothing_at_or_after_the_step_being_saved_is_touched(tmp_path: Path) -> None:
    _step(tmp_path, 2)
    later = _step(tmp_path, 9, complete=False)  # not this run's to judge
    _step(tmp_path, 5)
    prune_checkpoints(tmp_path, keep_last=1, step=5)
    assert later.exists()
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == [
        "step-000005",
        "step-000009",
    ]
