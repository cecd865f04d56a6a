"""RolloutProducer: steps start at most `max_staleness` versions ahead, failures reach the trainer,
nothing hangs."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from paravt.train.producer import RolloutProducer


class Trainer:
    """Takes steps in order, 'trains' (sleeps) and pushes version = step, like train_rl."""

    def __init__(self, max_staleness: int, steps: int, gen_s: list[float], train_s: float) -> None:
        self.started: dict[int, int] = {}  # step -> version the servers held when it started
        self.running: set[int] = set()
        self.peak = 0
        self.lock = threading.Lock()
        self.gen_s, self.train_s = gen_s, train_s
        self.producer = RolloutProducer(
            self.prepare, self.generate, first=1, last=steps, max_staleness=max_staleness, version=0
        )

    def prepare(self, step: int) -> int:
        with self.lock:
            self.started[step] = self.producer.version if hasattr(self, "producer") else 0
        return step

    async def generate(self, step: int) -> str:
        with self.lock:
            self.running.add(step)
            self.peak = max(self.peak, len(self.running))
        await asyncio.sleep(self.gen_s[(step - 1) % len(self.gen_s)])
        with self.lock:
            self.running.discard(step)
        return f"rollouts of step {step}"

    def run(self, steps: int) -> list[int]:
        staleness = []
        with self.producer:
            for step in range(1, steps + 1):
                got = self.producer.take(step, timeout_s=30)
                assert got.result == f"rollouts of step {step}" and got.prepared == step
                staleness.append(got.staleness)
                time.sleep(self.train_s)
                self.producer.set_version(step)
        return staleness


@pytest.mark.parametrize("max_staleness", [0, 1, 2])
def test_steps_start_at_most_max_staleness_versions_ahead(max_staleness: int) -> None:
    # uneven generation times: a slow step must not let later ones run further ahead
    trainer = Trainer(max_staleness, steps=6, gen_s=[0.05, 0.15, 0.02], train_s=0.03)
    staleness = trainer.run(6)
    assert all(0 <= s <= max_staleness for s in staleness), staleness
    for step, version in trainer.started.items():
        assert step - 1 - version <= max_staleness
    assert trainer.peak <= max_staleness + 1
    if max_staleness:
        assert max(staleness) >= 1, "generation never overlapped training"
        assert trainer.peak >= 2
    else:
        assert staleness == [0] * 6 and trainer.peak == 1


def test_a_failed_step_reaches_take_and_fails_later_steps_too() -> None:
    async def generate(step: int) -> int:
        await asyncio.sleep(0.01)
        if step == 2:
            raise ConnectionError("server http://127.0.0.1:1 is gone")
        return step

    with RolloutProducer(lambda s: s, generate, first=1, last=4, max_staleness=2, version=0) as p:
        assert p.take(1, timeout_s=10).result == 1
        p.set_version(1)
        with pytest.raises(ConnectionError, match="is gone"):
            p.take(2, timeout_s=10)
        with pytest.raises(ConnectionError):
            p.take(3, timeout_s=10)


def test_a_failed_prepare_reaches_take() -> None:
    def prepare(step: int) -> int:
        if step == 1:
            raise FileNotFoundError("video clips/x.mp4 not found")
        return step

    async def generate(step: int) -> int:
        return step

    with (
        RolloutProducer(prepare, generate, first=1, last=3, max_staleness=1, version=0) as p,
        pytest.raises(FileNotFoundError, match=r"x\.mp4"),
    ):
        p.take(1, timeout_s=10)


def test_close_while_generating_does_not_hang_and_releases_waiters() -> None:
    async def generate(step: int) -> int:
        await asyncio.sleep(60)
        return step

    p = RolloutProducer(lambda s: s, generate, first=1, last=5, max_staleness=3, version=0)
    time.sleep(0.05)
    t0 = time.perf_counter()
    p.close(timeout_s=10)
    assert time.perf_counter() - t0 < 10
    assert not p._thread.is_alive()
    with pytest.raises((RuntimeError, asyncio.CancelledError)):
        p.take(1, timeout_s=5)


def test_take_rejects_steps_outside_its_range() -> None:
    async def generate(step: int) -> int:
        return step

    with RolloutProducer(lambda s: s, generate, first=3, last=4, max_staleness=0, version=2) as p:
        with pytest.raises(ValueError, match="outside"):
            p.take(5)
        assert p.take(3, timeout_s=10).staleness == 0


def test_versions_and_close_after_every_step_is_produced_are_harmless() -> None:
    async def generate(step: int) -> int:
        return step

    p = RolloutProducer(lambda s: s, generate, first=1, last=2, max_staleness=1, version=0)
    assert p.take(1, timeout_s=10).result == 1
    assert p.take(2, timeout_s=10).result == 2
    p._thread.join(10)  # everything produced: the loop has finished and closed
    assert not p._thread.is_alive()
    p.set_version(1)
    p.set_version(2)
    p.close()
