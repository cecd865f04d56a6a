"""Rollouts generated ahead of the trainer, at most `max_staleness` weight versions behind.

The reference trains asynchronously (AReaL, `max_head_offpolicyness: 2`): the rollout servers
keep generating while the trainer scores, updates and pushes weights, and the decoupled PPO loss
corrects for tokens sampled by older weights (each token keeps the log-prob of the weights that
sampled it). `RolloutProducer` is that for one trainer rank: one background thread with one
asyncio event loop for its whole life starts the episodes of step `s` as soon as the servers hold
weights at most `max_staleness` optimiser steps older than the ones step `s` trains, i.e. once the
trainer has pushed version `s - 1 - max_staleness`. With `max_staleness = 0` step `s` starts
only after version `s - 1` is pushed: synchronous training (the trainer then does not use this
class at all).

Steps are prepared (`prepare(step)`: pick prompts, decode overviews; blocking, in a worker
thread) strictly in step order, then generated (`generate(prepared)`, a coroutine) concurrently
with the steps before them. `take(step)` blocks until that step's rollouts are done and re-raises
anything its preparation or generation raised; a failure also fails every later step, so no rank
waits for a step that will never come. No collective is made here: every trainer rank runs its
own producer, and the trainer's collectives stay on the main thread, the same on every rank.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

P = TypeVar("P")
R = TypeVar("R")


@dataclass(frozen=True)
class Produced(Generic[P, R]):
    """One step's rollouts: what `prepare` returned, what `generate` returned, the weight
    version the servers held when the step started, and when it started and ended."""

    step: int
    prepared: P
    result: R
    started_version: int
    started_at: float
    ended_at: float

    @property
    def staleness(self) -> int:
        """Optimiser steps between the weights that started these rollouts and the weights that
        train on them (version `step - 1`)."""
        return self.step - 1 - self.started_version


class RolloutProducer(Generic[P, R]):
    """Generates steps `first..last` ahead of the trainer with bounded staleness (see module)."""

    def __init__(
        self,
        prepare: Callable[[int], P],
        generate: Callable[[P], Awaitable[R]],
        *,
        first: int,
        last: int,
        max_staleness: int,
        version: int,
        name: str = "paravt-rollouts",
    ) -> None:
        if max_staleness < 0:
            raise ValueError(f"max_staleness must be >= 0, got {max_staleness}")
        if last < first - 1:
            raise ValueError(f"no steps between first={first} and last={last}")
        self.prepare, self.generate = prepare, generate
        self.first, self.last, self.max_staleness = first, last, max_staleness
        self._version = version
        self._futures: dict[int, concurrent.futures.Future[Produced[P, R]]] = {
            s: concurrent.futures.Future() for s in range(first, last + 1)
        }
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        self._ready.wait()

    # -------------------------------------------------------------------- the trainer's side

    @property
    def version(self) -> int:
        return self._version

    def set_version(self, version: int) -> None:
        """The servers now hold weights `version` (after the trainer's push): later steps may
        start."""
        self._call(self._bump, version)

    def take(self, step: int, timeout_s: float | None = None) -> Produced[P, R]:
        """Block until `step`'s rollouts are done; re-raises what producing them raised."""
        if step not in self._futures:
            raise ValueError(
                f"step {step} is outside this producer's {self.first}..{self.last} "
                "(or was taken already)"
            )
        produced = self._futures[step].result(timeout=timeout_s)
        del self._futures[step]  # after the result: the producer thread sets it through the dict
        return produced

    def close(self, timeout_s: float = 30.0) -> None:
        """Cancel what is still running and stop the thread (also after a failure)."""
        self._call(self._cancel_all)
        self._thread.join(timeout_s)

    def _call(self, fn: Callable[..., None], *args: Any) -> None:
        """Run `fn` on the producer's loop, unless it has finished (every step produced)."""
        with contextlib.suppress(RuntimeError):  # closed: nothing left to start or cancel
            self._loop.call_soon_threadsafe(fn, *args)

    def __enter__(self) -> RolloutProducer[P, R]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------- the producer thread

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._changed = asyncio.Event()
        main = self._loop.create_task(self._produce())
        self._tasks.add(main)
        self._ready.set()
        try:
            self._loop.run_until_complete(self._wait_all())
        finally:
            for fut in list(self._futures.values()):  # closed early: nobody waits forever
                if not fut.done():
                    fut.set_exception(RuntimeError("the rollout producer was closed"))
            self._loop.close()

    async def _wait_all(self) -> None:
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
            self._tasks = {t for t in self._tasks if not t.done()}

    def _bump(self, version: int) -> None:
        self._version = max(self._version, version)
        self._changed.set()

    def _cancel_all(self) -> None:
        for task in self._tasks:
            task.cancel()

    def _fail_from(self, step: int, exc: BaseException) -> None:
        for s in range(step, self.last + 1):
            fut = self._futures.get(s)
            if fut is not None and not fut.done():
                fut.set_exception(exc)

    async def _produce(self) -> None:
        for step in range(self.first, self.last + 1):
            try:
                while step - 1 - self._version > self.max_staleness:
                    self._changed.clear()
                    await self._changed.wait()
                version, started = self._version, time.perf_counter()
                prepared = await asyncio.to_thread(self.prepare, step)
            except BaseException as exc:
                self._fail_from(step, exc)
                return
            task = self._loop.create_task(self._one(step, prepared, version, started))
            self._tasks.add(task)

    async def _one(self, step: int, prepared: P, version: int, started: float) -> None:
        try:
            result = await self.generate(prepared)
        except BaseException as exc:
            self._fail_from(step, exc)
            return
        fut = self._futures.get(step)
        if fut is not None and not fut.done():
            fut.set_result(Produced(step, prepared, result, version, started, time.perf_counter()))
