"""Evaluation over several OpenAI-compatible servers: a rolling pool spread over them, the driver's
defaults (4 samples in flight per server, 1800 s per request), every sample counted."""

from __future__ import annotations

import numpy as np
import pytest

from paravt.core import Frame
from paravt.core.testing import StaticToolbox
from paravt.core.testing.stand_in import FakeChatServer
from paravt.eval.agent import EvalAgent, VideoQuestion
from paravt.eval.config import EvalConfig, parse_eval_config


class PixelSource:
    """Tiny real frames (the OpenAI engine encodes them as data URLs) and a static toolbox."""

    def overview(self, video, num_frames):
        pixels = np.zeros((28, 28, 3), dtype=np.uint8)
        return 60.0, [Frame(pixels, 60.0 * (i + 0.5) / num_frames) for i in range(num_frames)]

    def toolbox(self, video):
        return StaticToolbox(duration_s=60.0)


def answer(body):
    return "<think>It is not A.</think><answer>B</answer>"


def samples(n):
    return [
        VideoQuestion(f"s{i}", f"v{i}.mp4", "What colour?", options=["red", "blue"], doc_id=i)
        for i in range(n)
    ]


def paper_config(base_url, in_flight, ahead):
    """One server, the paper protocol with a 2-frame overview, `in_flight` samples at it and
    `ahead` decoded ahead (None: the default)."""
    return EvalConfig(
        base_url=base_url,
        model="m",
        protocol="paper",
        main_nframes=2,
        samples_per_server=in_flight,
        prepare_ahead=ahead,
    )


def test_the_drivers_server_defaults_are_the_defaults():
    config = EvalConfig(base_url="http://127.0.0.1:1/v1", model="m")
    assert config.timeout_s == 1800.0 and config.samples_per_server == 4
    assert config.in_flight == 4
    two = EvalConfig(base_url="http://a:1/v1| http://b:2/v1/", model="m")
    assert two.base_urls == ["http://a:1/v1", "http://b:2/v1"] and two.in_flight == 8
    assert (
        EvalConfig(base_url="http://a:1/v1|http://b:2/v1", model="m", concurrency=3).in_flight == 3
    )


@pytest.mark.parametrize(
    ("base_url", "message"),
    [("|", "base_url is empty"), ("http://a:1/v1|localhost:8000", r"not an http\(s\) URL")],
)
def test_a_bad_server_list_is_refused_naming_it(base_url, message):
    with pytest.raises(ValueError, match=message):
        parse_eval_config({"base_url": base_url, "model": "m"})


def test_samples_are_spread_over_every_server_within_the_per_server_limit():
    latency = lambda body: 0.15  # noqa: E731 - every request takes a while, so samples overlap
    with (
        FakeChatServer(answer, latency, model="m") as a,
        FakeChatServer(answer, latency, model="m") as b,
    ):
        config = EvalConfig(
            base_url=f"{a.base_url}|{b.base_url}",
            model="m",
            protocol="paper",
            main_nframes=2,
            samples_per_server=2,
        )
        agent = EvalAgent(config, source=PixelSource())
        assert agent.rolling and [e.base_url for e in agent.engines] == [a.base_url, b.base_url]
        traces = agent.run(samples(12))
    assert [t.doc_id for t in traces] == list(range(12))
    assert all(t.error is None and t.answer == "B" for t in traces)
    # paper protocol, answered in the first turn: one request per sample
    assert len(a.bodies) + len(b.bodies) == 12
    assert len(a.bodies) >= 4 and len(b.bodies) >= 4
    assert a.max_in_flight == 2 and b.max_in_flight == 2  # filled, never past the limit


def test_a_server_that_is_down_errors_its_samples_and_the_others_still_count():
    with FakeChatServer(answer, model="m") as up:
        down = "http://127.0.0.1:9/v1"  # discard port: nothing listens
        config = EvalConfig(
            base_url=f"{up.base_url}|{down}",
            model="m",
            protocol="paper",
            main_nframes=2,
            samples_per_server=1,
        )
        agent = EvalAgent(config, source=PixelSource())
        for engine in agent.engines:
            engine.retry_backoff_s = 0.0
        traces = agent.run(samples(6))
    assert len(traces) == 6
    errored = [t for t in traces if t.error]
    assert errored and all(down in str(t.error) for t in errored)
    assert all(t.answer == "B" for t in traces if not t.error)
    assert len(errored) < 6


class CountingSource(PixelSource):
    """Counts the overviews decoded so far (they run in worker threads)."""

    def __init__(self):
        import threading

        self.lock = threading.Lock()
        self.decoded = 0

    def overview(self, video, num_frames):
        with self.lock:
            self.decoded += 1
        return super().overview(video, num_frames)


@pytest.mark.parametrize(("ahead", "held"), [(None, 4), (0, 2), (1, 3)])
def test_the_next_samples_are_decoded_while_the_slots_are_busy_and_no_more(ahead, held):
    """A freed slot must not wait for a decode: while the server works, up to `prepare_ahead`
    more samples are prepared (default: as many as in flight); never more, since each holds its
    frames in memory."""
    latency = lambda body: 0.2  # noqa: E731 - decodes are instant, replies are not
    source = CountingSource()
    most = 0
    with FakeChatServer(answer, latency, model="m") as server:
        config = paper_config(server.base_url, 2, ahead)
        finished = 0

        def done(i, trace):
            nonlocal finished, most
            most = max(most, source.decoded - finished)  # decoded, not yet finished
            finished += 1

        traces = EvalAgent(config, source=source).run(samples(10), on_done=done)
    assert [t.doc_id for t in traces] == list(range(10))
    assert all(t.error is None and t.answer == "B" for t in traces)
    assert server.max_in_flight == 2  # the slots are still the limit at the server
    assert most == held


class BarrierSource(PixelSource):
    """Every overview waits until `parties` of them are decoding at once."""

    def __init__(self, parties):
        import threading

        self.barrier = threading.Barrier(parties, timeout=20)

    def overview(self, video, num_frames):
        self.barrier.wait()
        return super().overview(video, num_frames)


def test_the_first_samples_decode_together_whatever_asyncios_default_pool():
    """As the released driver's `workers_per_shard` threads: every sample in flight decodes at
    once, so the first wave reaches the server together. 40 in flight is more than asyncio's
    default pool ever has (at most 32 threads), so a decode on that pool never meets the barrier
    and the samples error."""
    with FakeChatServer(answer, model="m") as server:
        config = paper_config(server.base_url, 40, 0)
        traces = EvalAgent(config, source=BarrierSource(40)).run(samples(40))
    assert [t.error for t in traces] == [None] * 40
    assert all(t.answer == "B" for t in traces)


class SlowFirstSource(PixelSource):
    """v0 and v1 take a while to decode; the rest (like a `video_url` sample) are ready at once."""

    def overview(self, video, num_frames):
        import time

        if video in ("v0.mp4", "v1.mp4"):
            time.sleep(0.4)
        return super().overview(video, num_frames)


def test_samples_take_the_slots_in_their_order_whoever_decodes_first():
    """Decoding ahead must not reorder the run: samples ready sooner wait for the earlier ones,
    which would otherwise be pushed to the end (the driver and the server's own rate go in
    order)."""
    import json
    import re

    latency = lambda body: 0.2  # noqa: E731
    with FakeChatServer(answer, latency, model="m") as server:
        config = paper_config(server.base_url, 2, 4)
        traces = EvalAgent(config, source=SlowFirstSource()).run(samples(8))
        sent = [re.search(r"v\d+\.mp4", json.dumps(b))[0] for b in server.bodies]
    assert all(t.error is None and t.answer == "B" for t in traces)
    assert sorted(sent[:2]) == ["v0.mp4", "v1.mp4"]
    assert sorted(sent) == [f"v{i}.mp4" for i in range(8)]
