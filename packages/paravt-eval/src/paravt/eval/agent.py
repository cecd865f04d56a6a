"""Run the ParaVT agent on (video, question) samples: the one path `ask`, lmms-eval and `reproduce` use.

`EvalAgent` owns an engine (a local checkpoint through transformers, or an OpenAI-compatible
server) and one agent protocol (`EvalConfig.resolved_protocol()`, as each question's kind asks it:
`AgentProtocol.for_question`); per sample it builds the main prompt over the overview frames of the
sample's own video and a `crop_video` toolbox over that same video, then runs
`paravt.core.run_episodes`. Over a server, samples move as a rolling pool
(`samples_per_server` in flight on each server, each advancing on its own); a local checkpoint generates `batch_size`
samples together in lockstep. A sample that cannot be prepared or run (missing video, decode
failure, engine error, anything raised) comes back as a trace with `error` set; it is counted,
never dropped.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paravt.core import (
    ANSWER_KINDS,
    AgentConfig,
    AgentProtocol,
    AgentTask,
    AnswerKind,
    Engine,
    Episode,
    Frame,
    run_episodes,
)
from paravt.core.engines import HFEngine, OpenAIEngine
from paravt.eval.config import EvalConfig
from paravt.eval.sampling import seeded
from paravt.eval.sources import VideoSource, default_source
from paravt.eval.traces import SampleTrace, trace_from_episode
from paravt.eval.video import local_path


@dataclass
class VideoQuestion:
    """One sample: the video it belongs to and the question (options already in the text, or
    given separately as `options`)."""

    key: str
    video: str
    question: str
    options: list[str] | None = None
    task: str = "ask"
    doc_id: int | str = 0
    answer_kind: str = "mcq"  # mcq, grounding or open: the final-answer note and the extraction
    # True: lay the question (and options) out with the protocol's template; False: the text is
    # final as given (a benchmark task already formatted it).
    template: bool = True


def build_engine(
    config: EvalConfig, protocol: AgentProtocol | None = None, base_url: str | None = None
) -> Engine:
    """The engine for `config`: `HFEngine` for `pretrained` (bfloat16 on CUDA unless `dtype`
    says otherwise), `OpenAIEngine` for a server (`base_url`, default the config's first; images
    and request body as the protocol's transport says; the driver's timeout and retries)."""
    protocol = protocol or config.resolved_protocol()
    if config.pretrained:
        dtype_name = config.torch_dtype()
        dtype = None
        if dtype_name is not None:
            import torch

            dtype = getattr(torch, dtype_name)
        return HFEngine(
            str(Path(config.pretrained).expanduser()), device=config.device, dtype=dtype
        )

    t = protocol.transport
    return OpenAIEngine(
        base_url=base_url or config.base_urls[0],
        model=str(config.model),
        api_key=config.api_key,
        timeout_s=config.timeout_s,
        image_format=t.image_format,
        jpeg_quality=t.jpeg_quality,
        minimal_body=t.minimal_body,
        max_concurrency=max(16, config.in_flight),
        retries=2,  # three attempts, as the released driver makes
    )


@dataclass
class Prepared:
    task: AgentTask
    overview_frames: int
    duration_s: float | None
    prepare_s: float
    protocol: AgentProtocol  # the run's protocol as this sample's kind of question asks it
    agent_config: AgentConfig


class EvalAgent:
    """Evaluates one model under one protocol. Not thread-safe; one instance per process.

    `engine` and `source` default to the configured model and to paravt-tools' decoder and
    crop_video toolbox (`paravt.eval.video.ToolsVideoSource`).
    """

    def __init__(
        self,
        config: EvalConfig,
        engine: Engine | None = None,
        source: VideoSource | None = None,
    ) -> None:
        self.config = config
        self.protocol = config.resolved_protocol()
        if engine is not None:
            self.engines = [engine]
        elif config.base_url:  # one engine per server; a sample stays on its server
            self.engines = [build_engine(config, self.protocol, url) for url in config.base_urls]
        else:
            self.engines = [build_engine(config, self.protocol)]
        self.engine = self.engines[0]
        if source is None:
            source = default_source(config, self.protocol)
        self.source = source
        self.agent_config = self.protocol.agent_config(dispatch=config.dispatch)
        self._by_kind: dict[str, tuple[AgentProtocol, AgentConfig]] = {}

    def config_for(self, sample: VideoQuestion) -> AgentConfig:
        """The agent config `sample` runs under (its kind of question picks the protocol)."""
        return self.protocol_for(_kind(sample.answer_kind))[1]

    def protocol_for(self, kind: AnswerKind) -> tuple[AgentProtocol, AgentConfig]:
        """The protocol a question of `kind` is asked under (grounding questions may use their own
        prompt mode) and its runtime configuration."""
        if kind not in self._by_kind:
            protocol = self.protocol.for_question(kind, served=bool(self.config.base_url))
            config = (
                self.agent_config
                if protocol is self.protocol
                else protocol.agent_config(dispatch=self.config.dispatch)
            )
            self._by_kind[kind] = (protocol, config)
        return self._by_kind[kind]

    @property
    def rolling(self) -> bool:
        """Whether samples move as a rolling pool (a server engine) rather than in batches."""
        return bool(self.config.base_url) and not hasattr(self.engine, "generate_sync")

    def prepare(self, sample: VideoQuestion) -> Prepared:
        """Decode the sample's overview and build its prompt and toolbox."""
        t0 = time.perf_counter()
        kind = _kind(sample.answer_kind)
        p, agent_config = self.protocol_for(kind)
        duration_s: float | None
        frames: list[Frame]
        if p.overview.channel == "video_url":  # the server decodes the video itself
            local_path(sample.video)  # a missing video errors the sample here
            duration_s, frames = None, []
        else:
            duration_s, frames = self.source.overview(sample.video, p.overview.num_frames)
        text = (
            p.format_question(sample.question, sample.options, kind=kind)
            if sample.template
            else sample.question
        )
        video_name = Path(sample.video.removeprefix("file://")).name
        messages = p.build_main_prompt(
            text, frames, duration_s=duration_s, video_name=video_name, video_path=sample.video
        )
        toolbox = self.source.toolbox(sample.video)
        task = AgentTask(sample.key, messages, toolbox, sample.question, answer_kind=kind)
        elapsed = time.perf_counter() - t0
        agent_config = seeded(agent_config, self.config.seed, sample.key)
        return Prepared(task, len(frames), duration_s, elapsed, p, agent_config)

    def run(
        self,
        samples: Sequence[VideoQuestion],
        on_done: Callable[[int, SampleTrace], None] | None = None,
    ) -> list[SampleTrace]:
        """Run every sample; one trace per sample, in order. `on_done(index, trace)` is called as
        each sample finishes (in completion order for a rolling pool)."""
        if self.rolling:
            return asyncio.run(self._run_pool(samples, on_done))
        traces: list[SampleTrace] = []
        size = self.config.batch_size
        for start in range(0, len(samples), size):
            batch = self._run_batch(samples[start : start + size])
            for i, trace in enumerate(batch):
                if on_done is not None:
                    on_done(start + i, trace)
            traces.extend(batch)
        return traces

    async def _run_pool(
        self,
        samples: Sequence[VideoQuestion],
        on_done: Callable[[int, SampleTrace], None] | None,
    ) -> list[SampleTrace]:
        """At most `in_flight` samples at the servers; a new one starts as soon as one finishes,
        on the server with the fewest samples in flight (all its turns and sub-agents go there).

        Up to `prepare_ahead` more samples have their overview decoded while every slot is busy,
        so a freed slot sends a prepared sample at once instead of waiting for its decode (which
        on a loaded client can take longer than the server's turn).

        Samples take the slots in their order, whichever finishes decoding first: a sample the
        server decodes itself (`video_url`) would otherwise overtake the ones decoded here and
        put them, often the longer ones, at the end of the run (measured at 16 in flight: 42 s
        against 30 s with prepare_ahead 0, which keeps the order, in the same round).

        Decoding runs on `in_flight` threads of its own, as the released driver runs
        `workers_per_shard` threads: the first samples decode together and go to the server
        together. On asyncio's default pool (min(32, CPUs + 4) threads: 6 on 2 CPUs) they went
        6 at a time, and the last of 16 decoded while the server was already busy on a machine
        it shares: 15 s for each of the last four, 1.2 s for the first six
        (bench/bench_eval_driver.py, 16 in flight, 2 CPUs)."""
        pool = ThreadPoolExecutor(self.config.in_flight, thread_name_prefix="paravt-prepare")
        try:
            return await self._pool_over(samples, on_done, pool)
        finally:
            pool.shutdown(wait=False, cancel_futures=True)

    async def _pool_over(
        self,
        samples: Sequence[VideoQuestion],
        on_done: Callable[[int, SampleTrace], None] | None,
        pool: Executor,
    ) -> list[SampleTrace]:
        slots = asyncio.Semaphore(self.config.in_flight)
        out: list[SampleTrace | None] = [None] * len(samples)
        busy = [0] * len(self.engines)
        # Both in sample order, by events rather than semaphores (whose waiters need not be woken
        # in order): `admit[i]` lets sample i start decoding, at most `in_flight + ahead` samples
        # being prepared or running; `turn[i]` lets it take a slot once sample i - 1 has one.
        admit = [asyncio.Event() for _ in samples]
        turn = [asyncio.Event() for _ in samples]
        admitted = min(self.config.in_flight + self.config.ahead, len(samples))
        for event in admit[:admitted]:
            event.set()
        if turn:
            turn[0].set()

        def next_turn(i: int) -> None:
            if i + 1 < len(turn):
                turn[i + 1].set()

        def admit_next() -> None:
            nonlocal admitted
            if admitted < len(admit):
                admit[admitted].set()
                admitted += 1

        async def one(i: int, sample: VideoQuestion) -> None:
            await admit[i].wait()
            try:
                prepared = await self._prepare(sample, pool)
                await turn[i].wait()
                if isinstance(prepared, SampleTrace):
                    next_turn(i)
                    trace = prepared
                else:
                    async with slots:
                        next_turn(i)
                        server = min(range(len(busy)), key=busy.__getitem__)
                        busy[server] += 1
                        try:
                            trace = await self._episode(sample, prepared, self.engines[server])
                        finally:
                            busy[server] -= 1
            finally:
                admit_next()
            out[i] = trace
            if on_done is not None:
                on_done(i, trace)

        await asyncio.gather(*(one(i, s) for i, s in enumerate(samples)))
        return [t for t in out if t is not None]

    async def _prepare(
        self, sample: VideoQuestion, pool: Executor | None = None
    ) -> Prepared | SampleTrace:
        """The sample prepared off the event loop (on `pool`, else asyncio's default one), or an
        errored trace saying what failed."""
        try:
            return await asyncio.get_running_loop().run_in_executor(pool, self.prepare, sample)
        except BaseException as exc:
            if isinstance(exc, (KeyboardInterrupt, asyncio.CancelledError)):
                raise
            return _trace_of(sample, f"could not prepare the sample: {_describe(exc)}")

    async def _episode(
        self, sample: VideoQuestion, prepared: Prepared, engine: Engine
    ) -> SampleTrace:
        """One prepared sample's episode on `engine`: its trace, or an errored trace."""
        try:
            (episode,) = await run_episodes(
                [prepared.task], engine, prepared.agent_config, prepared.protocol
            )
        except BaseException as exc:
            if isinstance(exc, (KeyboardInterrupt, asyncio.CancelledError)):
                raise
            return _trace_of(sample, f"the agent run failed: {_describe(exc)}")
        return self._trace(sample, prepared, episode)

    def _trace(self, sample: VideoQuestion, prepared: Prepared, episode: Episode) -> SampleTrace:
        trace = trace_from_episode(
            _trace_of(sample),
            episode,
            overview_frames=prepared.overview_frames,
            duration_s=prepared.duration_s,
            prepare_s=prepared.prepare_s,
        )
        kind = _kind(sample.answer_kind)
        final = episode.turns[-1].response if episode.turns else ""
        protocol = prepared.protocol
        trace.response = protocol.extract_answer(final, episode.answer, kind)
        if protocol.answer.extraction == "driver":
            trace.answer = protocol.driver_prediction(final, kind)
        return trace

    def _run_batch(self, samples: Sequence[VideoQuestion]) -> list[SampleTrace]:
        out: list[SampleTrace | None] = [None] * len(samples)
        ready: list[tuple[int, Prepared]] = []
        for i, sample in enumerate(samples):
            try:
                ready.append((i, self.prepare(sample)))
            except BaseException as exc:
                if isinstance(exc, KeyboardInterrupt):
                    raise
                out[i] = _trace_of(sample, f"could not prepare the sample: {_describe(exc)}")
        # one runtime call per protocol (a grounding question may be asked in its own mode)
        for protocol in {id(p.protocol): p.protocol for _, p in ready}.values():
            group = [(i, p) for i, p in ready if p.protocol is protocol]
            tasks = [p.task for _, p in group]
            episodes = self._run_tasks(tasks, protocol, group[0][1].agent_config)
            for (i, prepared), episode in zip(group, episodes):
                sample = samples[i]
                if isinstance(episode, str):
                    out[i] = _trace_of(sample, f"the agent run failed: {episode}")
                    continue
                out[i] = self._trace(sample, prepared, episode)
        return [t for t in out if t is not None]

    def _run_tasks(
        self, tasks: list[AgentTask], protocol: AgentProtocol, config: AgentConfig
    ) -> list[Episode | str]:
        """Episodes in order; an episode that failed becomes its error text. When a batch fails,
        each task is retried alone so one bad sample does not lose the others."""
        try:
            return list(asyncio.run(run_episodes(tasks, self.engine, config, protocol)))
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            if len(tasks) == 1:
                return [_describe(exc)]
        return [r for task in tasks for r in self._run_tasks([task], protocol, config)]


def _kind(value: str) -> AnswerKind:
    if value not in ANSWER_KINDS:
        raise ValueError(f"answer kind {value!r} is not one of {', '.join(ANSWER_KINDS)}")
    return value  # type: ignore[return-value, unused-ignore]


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:2000]


def _trace_of(sample: VideoQuestion, error: str | None = None) -> SampleTrace:
    """A trace naming `sample` (task, document, video, question) before anything of it ran; with
    `error`, the trace of a sample that could not run (scored as wrong)."""
    return SampleTrace(
        task=sample.task,
        doc_id=sample.doc_id,
        video=sample.video,
        question=sample.question,
        response="",
        error=error,
    )


def options_from(value: Any) -> list[str] | None:
    """Options as a list of strings, or None (accepts a list or a JSON list string)."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        import json

        try:
            value = json.loads(value)
        except ValueError:
            return None
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return None
