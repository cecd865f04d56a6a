"""Run the ParaVT agent on (video, question) samples: the one path `ask`, lmms-eval and `reproduce` use.

`EvalAgent` owns an engine (a local checkpoint through transformers, or an OpenAI-compatible
server) and, per sample, builds the main prompt over the overview frames of the sample's own video
and a `crop_video` toolbox over that same video, then runs `paravt.core.run_episodes` on a batch.
A sample that cannot be prepared or run (missing video, decode failure, engine error) comes back as
a trace with `error` set; it is counted, never dropped.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from paravt.core import (
    AgentTask,
    Engine,
    Episode,
    Frame,
    Toolbox,
    build_main_prompt,
    run_episodes,
)
from paravt.eval.config import EvalConfig
from paravt.eval.traces import SampleTrace, trace_from_episode


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


def build_engine(config: EvalConfig) -> Engine:
    """The engine for `config`: `HFEngine` for `pretrained`, `OpenAIEngine` for `base_url`."""
    if config.pretrained:
        from paravt.core.engines import HFEngine

        return HFEngine(str(Path(config.pretrained).expanduser()), device=config.device)
    from paravt.core.engines import OpenAIEngine

    return OpenAIEngine(base_url=config.base_url, model=config.model, api_key=config.api_key)


@dataclass
class Prepared:
    task: AgentTask
    overview_frames: int
    duration_s: float
    prepare_s: float


class VideoSource(Protocol):
    """Where a sample's frames come from: its overview, and a crop_video toolbox over it."""

    def overview(self, video: str, num_frames: int) -> tuple[float, list[Frame]]:
        """(duration in seconds, `num_frames` frames spread over the whole video)."""
        ...

    def toolbox(self, video: str) -> Toolbox:
        """The crop_video toolbox over this sample's own video."""
        ...


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
        self.engine = engine if engine is not None else build_engine(config)
        if source is None:
            from paravt.eval.video import ToolsVideoSource

            source = ToolsVideoSource(
                max_pixels=config.max_pixels, max_crop_frames=config.max_crop_frames
            )
        self.source = source
        self.agent_config = config.agent_config()

    def prepare(self, sample: VideoQuestion) -> Prepared:
        """Decode the sample's overview and build its prompt and toolbox."""
        t0 = time.perf_counter()
        duration_s, frames = self.source.overview(sample.video, self.config.main_nframes)
        messages = build_main_prompt(
            sample.question,
            frames,
            mode=self.config.prompt_mode,
            options=sample.options,
            duration_s=duration_s,
            max_turns=self.config.max_turns,
            max_parallel=self.config.max_parallel,
            include_video_path=self.config.include_video_path,
        )
        toolbox = self.source.toolbox(sample.video)
        task = AgentTask(sample.key, messages, toolbox, sample.question)
        return Prepared(task, len(frames), duration_s, time.perf_counter() - t0)

    def run(self, samples: Sequence[VideoQuestion]) -> list[SampleTrace]:
        """Run every sample (in batches of `config.batch_size`); one trace per sample, in order."""
        traces: list[SampleTrace] = []
        size = self.config.batch_size
        for start in range(0, len(samples), size):
            traces.extend(self._run_batch(samples[start : start + size]))
        return traces

    def _run_batch(self, samples: Sequence[VideoQuestion]) -> list[SampleTrace]:
        out: list[SampleTrace | None] = [None] * len(samples)
        ready: list[tuple[int, Prepared]] = []
        for i, sample in enumerate(samples):
            try:
                ready.append((i, self.prepare(sample)))
            except Exception as exc:
                out[i] = _failed(sample, f"could not prepare the sample: {_describe(exc)}")
        if ready:
            episodes = self._run_tasks([p.task for _, p in ready])
            for (i, prepared), episode in zip(ready, episodes):
                sample = samples[i]
                if isinstance(episode, str):
                    out[i] = _failed(sample, f"the agent run failed: {episode}")
                    continue
                out[i] = trace_from_episode(
                    episode,
                    task=sample.task,
                    doc_id=sample.doc_id,
                    video=sample.video,
                    question=sample.question,
                    overview_frames=prepared.overview_frames,
                    duration_s=prepared.duration_s,
                    prepare_s=prepared.prepare_s,
                )
        return [t for t in out if t is not None]

    def _run_tasks(self, tasks: list[AgentTask]) -> list[Episode | str]:
        """Episodes in order; an episode that failed becomes its error text. When a batch fails,
        each task is retried alone so one bad sample does not lose the others."""
        try:
            return list(asyncio.run(run_episodes(tasks, self.engine, self.agent_config)))
        except Exception as exc:
            if len(tasks) == 1:
                return [_describe(exc)]
        return [r for task in tasks for r in self._run_tasks([task])]


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:2000]


def _failed(sample: VideoQuestion, error: str) -> SampleTrace:
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
