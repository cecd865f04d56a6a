"""Weights on their way to a rollout server: buckets of tensors, checkpoints on disk, and the
weight side every server client shares (`ServerWeights`).

Both server engines use these: `SGLangServerEngine` (`/update_weights_from_disk`, and buckets over
an NCCL group) and `VLLMServerEngine` (`reload_weights` from a directory). `ReloadGate` keeps a
client's requests and its reloads apart, for a server whose replies do not say which weights
produced them (`VLLMServerEngine`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import shutil
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from paravt.core.episode import Generated

__all__ = [
    "ReloadGate",
    "ServerWeights",
    "VersionedGenerated",
    "bucket_tensors",
    "iter_buckets",
    "write_checkpoint",
]


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


class ServerWeights:
    """The weight side of a rollout-server client, one interface for SGLang and vLLM.

    New weights go in as `(name, tensor)` pairs with a version (`push_weights_from_disk`: a
    checkpoint written under `directory/<version>/`, then every weight URL loads it), and the
    trainer checks what the servers hold (`check_weights`: every server's version, then its
    log-probs of a fixed sequence against the trainer's own). A client sets `weight_urls`,
    `expected_weight_version` (the version last pushed) and `prompt_token_mismatches` (prompts a
    server tokenized otherwise than the trajectory), and implements `_load_checkpoint`, `health`,
    `server_weight_versions` and `score`.
    """

    server_name: ClassVar[str] = "rollout"  # in messages: "SGLang server http://..."
    server_errors: ClassVar[tuple[type[Exception], ...]] = ()  # what a failed request raises
    weight_urls: list[str]
    expected_weight_version: str | None
    prompt_token_mismatches: int

    def health(self) -> Any:
        """Raise naming the servers that do not answer; what each one reports otherwise."""
        raise NotImplementedError

    def server_weight_versions(self) -> dict[str, str | None]:
        """The weight version each weight URL serves."""
        raise NotImplementedError

    def score(self, token_ids: Sequence[int], *, url: str | None = None) -> list[float]:
        """The served log-probs (temperature 1) of tokens 1..n-1 of `token_ids`."""
        raise NotImplementedError

    def _load_checkpoint(
        self, path: Path, version: str, pause: str | None, fmt: str | None
    ) -> None:
        """Have every weight URL load the checkpoint directory `path` as `version` (`pause` and
        the load format `fmt` as `push_weights_from_disk` passes them)."""
        raise NotImplementedError

    def push_weights_from_disk(
        self,
        named_tensors: Iterable[tuple[str, Any]],
        directory: str | Path,
        version: str,
        *,
        shard_bytes: int = 2 << 30,
        config_files: Sequence[str | Path] = (),
        pause: str | None = None,
        load_format: str | None = None,
    ) -> Path:
        """Save `(name, tensor)` pairs (checkpoint names) as safetensors shards of about
        `shard_bytes` (`write_checkpoint`, one shard in memory at a time) under
        `directory/<version>/` with the `config_files` beside them, then have every weight URL
        load them as `version`; `expected_weight_version` becomes `version`. Returns the
        checkpoint directory.

        `directory` must be readable by the servers under the same path (a shared or local disk).
        `pause`: how generation pauses around the load (SGLang: 'retract' / 'in_place', none by
        default; vLLM: 'abort' / 'wait' / 'keep', 'wait' by default). `load_format`: SGLang's
        (vLLM refuses one)."""
        version = str(version)
        target = write_checkpoint(
            named_tensors, directory, version, shard_bytes=shard_bytes, config_files=config_files
        )
        self._load_checkpoint(target, version, pause, load_format)
        self.expected_weight_version = version
        return target

    def check_weights(
        self,
        version: str,
        token_ids: Sequence[int],
        logprobs: Sequence[float],
        *,
        tolerance: float,
    ) -> tuple[float, str]:
        """Whether every weight URL serves `version` and gives tokens 1..n-1 of `token_ids` the
        `logprobs` (the trainer's, temperature 1) within `tolerance`: the largest difference seen
        (nan when none was measured) and what is wrong ("" if nothing).

        The version is what `server_weight_versions` reports (SGLang: `weight_version` of
        `/model_info`, built from `server_args.weight_version`; vLLM: `/weight_info`). A request
        that fails is the problem, not an exception."""
        worst = 0.0
        try:
            for url, served in self.server_weight_versions().items():
                if served != version:
                    return math.nan, (
                        f"{self.server_name} server {url} serves weight version {served!r}, "
                        f"expected {version!r}"
                    )
            for url in self.weight_urls:
                theirs = self.score(token_ids, url=url)
                if len(theirs) != len(logprobs):
                    return math.nan, (
                        f"{self.server_name} server {url} scored {len(theirs)} tokens of a fixed "
                        f"sequence, the trainer {len(logprobs)}"
                    )
                diffs = [abs(a - b) for a, b in zip(theirs, logprobs)]
                diff = math.nan if any(map(math.isnan, diffs)) else max(diffs, default=0.0)
                worst = diff if math.isnan(diff) else max(worst, diff)
                if not diff <= tolerance:  # a nan fails too
                    return worst, (
                        f"{self.server_name} server {url} serves weight version {version!r} as "
                        "expected, but its log-probs of a fixed sequence differ from the "
                        f"trainer's by up to {diff:.3g} (tolerance {tolerance:g})"
                    )
        except self.server_errors as exc:
            return math.nan, str(exc)
        return worst, ""


@dataclass
class VersionedGenerated(Generated):
    """A reply with the weight version it was generated with, all of it (`ReloadGate`)."""

    weight_version: str | None = None


class ReloadGate:
    """Which weights a request is sent under, and no request across a reload. Thread-safe: the
    requests run on an event loop (the trainer's rollout producer has its own thread), reloads
    come from the trainer's thread.

    A request `enter`s (waiting while a reload holds the gate), is counted in flight and gets the
    version in force; it `leave`s when its reply is back. `hold` closes the gate to new requests
    and waits until none is in flight (at most `timeout_s`: then it opens again and raises, rather
    than reload under a request); `release(version)` records the version now served and, when the
    last hold is released, lets the waiting requests go. Holds nest (the trainer holds every rank
    across the push, the reload holds again inside). `reloads` counts the releases with a
    version (all of them happen while the gate is held); a request that sees it change between its `enter` and `leave` was in flight across a
    reload, which the client refuses (`VLLMServerEngine`).
    """

    def __init__(
        self, version: str | None = None, *, error: type[Exception] = RuntimeError
    ) -> None:
        self.version = version
        self.error = error  # what a refused request or hold raises (the client's error)
        self.reloads = 0
        self.in_flight = 0
        self.waited_s = 0.0  # time the holds spent waiting for requests in flight, in all
        self._holds = 0
        self._broken: str | None = None
        self._cond = threading.Condition()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    @property
    def held(self) -> bool:
        return self._holds > 0

    async def enter(self) -> tuple[str | None, int]:
        """Wait until no reload holds the gate; count this request in flight. Returns the
        version in force and the reload count (for `leave`)."""
        while True:
            with self._cond:
                if self._broken is not None:
                    raise self.error(self._broken)
                if not self._holds:
                    self.in_flight += 1
                    return self.version, self.reloads
                loop = asyncio.get_running_loop()
                waiter: asyncio.Future[None] = loop.create_future()
                self._waiters.append((loop, waiter))
            await waiter

    def leave(self) -> None:
        with self._cond:
            self.in_flight -= 1
            self._cond.notify_all()

    def hold(self, timeout_s: float) -> float:
        """Close the gate to new requests and wait until none is in flight; the seconds waited.
        Do not call it from the event loop the requests run on (they could not finish)."""
        t0 = time.perf_counter()
        with self._cond:
            self._holds += 1
            if not self._cond.wait_for(lambda: self.in_flight == 0, timeout=timeout_s):
                in_flight = self.in_flight
                self._holds -= 1
                self._wake()
                raise self.error(
                    f"{in_flight} request(s) still in flight after {timeout_s:g} s: a reload now "
                    "would change the weights under them, and nothing would tell which weights "
                    "produced their replies; not reloading (raise the timeout, or find the "
                    "request that does not finish)"
                )
            waited = time.perf_counter() - t0
            self.waited_s += waited
            return waited

    def release(self, version: str | None, *, failed: str | None = None) -> None:
        """The reload is over and the servers serve `version`; the last release opens the gate.
        `failed`: the reload failed and the served weights are unknown; every later request
        raises with this message."""
        with self._cond:
            self._holds = max(self._holds - 1, 0)
            if failed is not None:
                self._broken = failed
            elif version is not None:
                self.version = version
                self.reloads += 1
            if not self._holds:
                self._wake()

    def _wake(self) -> None:
        """Let the requests waiting at the gate go (under the lock)."""
        waiters, self._waiters = self._waiters, []
        for loop, waiter in waiters:
            with contextlib.suppress(RuntimeError):  # its loop is closed: nobody waits there
                loop.call_soon_threadsafe(_set_done, waiter)

    @contextlib.contextmanager
    def holding(self, version: str, timeout_s: float) -> Iterator[None]:
        """`hold`, then `release(version)`; if the body raises, the gate is broken (the servers'
        weights are unknown) and the error goes on."""
        self.hold(timeout_s)
        try:
            yield
        except BaseException as exc:
            failed = (
                f"a weight reload to {version!r} failed ({exc!r}): the servers' weights are "
                "unknown, so no reply could be tagged with them"
            )
            self.release(None, failed=failed)
            raise
        self.release(version)


def _set_done(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():  # a cancelled request no longer waits
        waiter.set_result(None)
