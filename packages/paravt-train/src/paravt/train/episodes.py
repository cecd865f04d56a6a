"""Sampled RL episodes on disk: a few per step and budget K, in the schema of
`paravt.core.episode_records` (what the agent saw, did and was paid; its docstring writes it out).

Under `<output_dir>/episodes/`, rank 0 writes them (other ranks' episodes are not recorded, and
nothing here is a collective): `episodes.jsonl`, one line per episode, one write per step, flushed
and fsynced; `images/step_NNNNNN/*.jpg` thumbnails, each written to a temporary file and renamed.
A fresh run clears the folder; `--resume` from step S keeps the records of steps <= S and drops
those of later steps (they run again) with their images, so no step is recorded twice. The whole
folder stays under `logging.episodes_max_mib`: an episode that would pass the cap is not written,
and recording stops for the run with one warning.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from paravt.core.episode_files import (
    EPISODES_FILE,
    IMAGES_DIR,
    folder_size,
    safe_name,
    truncate_episodes,
    write_atomic,
)
from paravt.core.episode_records import episode_record, thumbnail_jpeg
from paravt.rewards import episode_structure

log = logging.getLogger("paravt.train")


def sample_indices(budgets: Sequence[int], per_k: int) -> list[int]:
    """`per_k` episodes per overview budget K, spread evenly over that K's episodes (so over its
    groups), in batch order."""
    picked: list[int] = []
    for k in sorted(set(budgets)):
        at_k = [i for i, b in enumerate(budgets) if b == k]
        n = min(per_k, len(at_k))
        picked += sorted({at_k[(j * len(at_k)) // n] for j in range(n)})
    return sorted(picked)


# --------------------------------------------------------------------------------------------------
# The run's recorder


class EpisodeRecorder:
    """Writes `per_k` episodes per step and K into `root` (see the module), under `max_mib`."""

    def __init__(self, root: Path, *, per_k: int, max_mib: float, start: int = 0) -> None:
        self.root = Path(root)
        self.per_k = per_k
        self.cap = int(max_mib * 2**20)
        self.stopped = False
        if start <= 0:
            shutil.rmtree(self.root, ignore_errors=True)
        else:
            truncate_episodes(self.root, start)
        (self.root / IMAGES_DIR).mkdir(parents=True, exist_ok=True)
        self.size = folder_size(self.root)

    @property
    def path(self) -> Path:
        return self.root / EPISODES_FILE

    def record(
        self, step: int, ro: Any, *, weight_version: int, tool_response: str = "subagent"
    ) -> list[dict[str, Any]]:
        """Record step `step`'s sample of the scored rollouts `ro`; returns the records written
        (for the trackers: `MetricsLogger.log_episodes`)."""
        if self.stopped or self.per_k <= 0 or not ro.episodes:
            return []
        step_dir = f"{IMAGES_DIR}/step_{step:06d}"
        lines: list[bytes] = []
        written: list[dict[str, Any]] = []
        shared: dict[str, str] = {}  # one overview per prompt: its rollouts share it
        for i in sample_indices(ro.budgets, self.per_k):
            ep = ro.episodes[i]
            pending: dict[str, bytes] = {}
            prompt_key = ep.key.rsplit("#", 1)[0]
            tag = safe_name(ep.key)

            def image(
                name: str,
                data: Any,
                tag: str = tag,
                prompt_key: str = prompt_key,
                pending: dict[str, bytes] = pending,
            ) -> str:
                if name.startswith("ov"):
                    ref = f"{step_dir}/{safe_name(prompt_key)}_{name}.jpg"
                    if ref in shared or (self.root / ref).exists():
                        shared[ref] = ref
                        return ref
                else:
                    ref = f"{step_dir}/{tag}_{name}.jpg"
                pending[ref] = thumbnail_jpeg(data)
                return ref

            rec = episode_record(
                ep,
                ro.examples[i],
                ro.budgets[i],
                ro.rewards[i],
                ro.advantages[i] if i < len(ro.advantages) else math.nan,
                shape=episode_structure([t.parsed for t in ep.turns]),
                step=step,
                weight_version=weight_version,
                index=i,
                tool_response=tool_response,
                image=image,
            )
            line = (json.dumps(rec, ensure_ascii=False, allow_nan=False) + "\n").encode()
            cost = len(line) + sum(len(b) for b in pending.values())
            if self.size + cost > self.cap:
                self.stopped = True
                log.warning(
                    "episodes: the folder %s reached logging.episodes_max_mib=%g MiB at step %d; "
                    "no more episodes are recorded in this run",
                    self.root,
                    self.cap / 2**20,
                    step,
                )
                break
            for ref, data in pending.items():
                write_atomic(self.root / ref, data)
                shared[ref] = ref
            self.size += cost
            lines.append(line)
            written.append(rec)
        if lines:
            with self.path.open("ab") as f:
                f.write(b"".join(lines))
                f.flush()
                os.fsync(f.fileno())
        return written
