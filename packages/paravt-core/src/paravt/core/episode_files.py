"""The episode folder on disk: its file names, atomic writes, its size, the cut a resume makes, and
reading its records back (`paravt.core.episode_records` documents the schema; RL runs and
`paravt-eval ask --trace` write it)."""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

EPISODES_FILE = "episodes.jsonl"
IMAGES_DIR = "images"


def safe_name(key: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", key)[:80]


def write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".tmp-{path.name}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def folder_size(root: Path) -> int:
    """Bytes of every file under `root` (0 when it does not exist)."""
    if not root.exists():
        return 0
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def truncate_episodes(root: Path, last_step: int) -> None:
    """Keep the records and images of steps <= `last_step` (a resume runs the later ones again);
    a line cut by a kill is dropped."""
    path = Path(root) / EPISODES_FILE
    if path.is_file():
        keep = []
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if int(row.get("step", 0)) <= last_step:
                keep.append(line)
        write_atomic(path, "".join(line + "\n" for line in keep).encode())
    images = Path(root) / IMAGES_DIR
    if images.is_dir():
        for d in images.iterdir():
            m = re.fullmatch(r"step_(\d+)", d.name)
            if m and int(m.group(1)) > last_step:
                shutil.rmtree(d, ignore_errors=True)


class EpisodesNotFound(FileNotFoundError):
    """No episodes.jsonl where one was asked for (a command line's input error)."""


def read_episodes(path: Path) -> Iterator[dict[str, Any]]:
    """The records of `path` (a run directory, its episodes/ folder or an episodes.jsonl), in
    file order; lines that are not whole JSON objects are skipped."""
    path = Path(path)
    if path.is_dir():
        own = path / EPISODES_FILE
        path = own if own.is_file() else path / "episodes" / EPISODES_FILE
    if not path.is_file():
        raise EpisodesNotFound(
            f"no {path}: RL runs write <output_dir>/episodes/{EPISODES_FILE} "
            "when logging.episodes_per_k > 0; paravt-eval writes one with `ask --trace DIR` and "
            "beside the plugin's traces (model arg episodes=N)"
        )
    with path.open() as f:
        for line in f:
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(row, dict):
                yield row


def episodes_dir(path: Path) -> Path:
    """The folder of episodes.jsonl for `path` (what image paths are relative to)."""
    path = Path(path)
    if path.is_file():
        return path.parent
    return path if (path / EPISODES_FILE).is_file() else path / "episodes"
