"""Weights on their way to a rollout server: buckets of tensors, and checkpoints on disk.

Both server engines use these: `SGLangServerEngine` (`/update_weights_from_disk`, and buckets over
an NCCL group) and `VLLMServerEngine` (`reload_weights` from a directory).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

__all__ = ["bucket_tensors", "iter_buckets", "write_checkpoint"]


def iter_buckets(
    named: Iterable[tuple[str, Any]], bucket_bytes: int
) -> Iterator[list[tuple[str, Any]]]:
    """`(name, tensor)` pairs, in order, in buckets of at most about `bucket_bytes` (a tensor
    larger than a bucket gets a bucket of its own), yielded as they fill: one bucket in memory."""
    if bucket_bytes < 1:
        raise ValueError(f"bucket_bytes must be positive, got {bucket_bytes}")
    bucket: list[tuple[str, Any]] = []
    size = 0
    for name, tensor in named:
        nbytes = int(tensor.numel()) * int(tensor.element_size())
        if bucket and size + nbytes > bucket_bytes:
            yield bucket
            bucket, size = [], 0
        bucket.append((name, tensor))
        size += nbytes
    if bucket:
        yield bucket


def bucket_tensors(
    named: Iterable[tuple[str, Any]], bucket_bytes: int
) -> list[list[tuple[str, Any]]]:
    """All of `iter_buckets` as a list."""
    return list(iter_buckets(named, bucket_bytes))


def write_checkpoint(
    named_tensors: Iterable[tuple[str, Any]],
    directory: str | Path,
    version: str,
    *,
    shard_bytes: int = 2 << 30,
    config_files: Sequence[str | Path] = (),
) -> Path:
    """Save `(name, tensor)` pairs (checkpoint names) as safetensors shards of about
    `shard_bytes` (written as they fill, one in memory at a time) with an index, and the
    `config_files` beside them, into `directory/<version>/`; returns that directory. It appears
    whole or not at all (written under `<version>.tmp`, then renamed)."""
    from safetensors.torch import save_file

    target = Path(directory) / str(version)
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    index: dict[str, str] = {}
    total = 0
    shards = iter_buckets(
        ((n, t.detach().contiguous().cpu()) for n, t in named_tensors), shard_bytes
    )
    for k, bucket in enumerate(shards):  # one shard in memory at a time
        fname = f"model-{k + 1:05d}.safetensors"
        save_file(dict(bucket), str(tmp / fname), metadata={"format": "pt"})
        for name, tensor in bucket:
            index[name] = fname
            total += int(tensor.numel()) * int(tensor.element_size())
    if not index:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ValueError("write_checkpoint: no tensors to write")
    (tmp / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": index}, indent=1)
    )
    for f in config_files:
        shutil.copy(f, tmp / Path(f).name)
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    return target
