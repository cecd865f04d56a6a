"""`--model paravt` for lmms-eval: the ParaVT agent (overview + parallel crop_video) as a chat model.

lmms-eval hands a chat model requests whose arguments are
`(context, doc_to_messages, gen_kwargs, doc_id, task, split)`; `doc_to_messages(doc)` gives the
chat messages of the benchmark sample (a `video` part with the sample's path and a `text` part with
the question, options and the task's answer instruction). For each sample this model runs the agent
on that video and returns the final answer text for the task's own scorer. The agent protocol
(turns, calls per turn, 2048 new tokens, greedy) comes from the model arguments, not from the
task's `generation_kwargs` (which ask for a handful of tokens for direct answering); the model logs
which protocol and why when it starts (`EvalConfig.protocol_line`).

Per-sample traces go to a JSONL file beside lmms-eval's results (see `default_trace_path`), plus a
`.summary.json` with `avg_tool_calls`, `tool_usage_rate`, the protocol, and the errored count per
task with the reasons; errored samples are scored wrong, and logged by reason at the end.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from lmms_eval.api.instance import Instance
from lmms_eval.api.model import lmms
from loguru import logger
from tqdm import tqdm

from paravt.eval.agent import EvalAgent, VideoQuestion, options_from
from paravt.eval.config import EvalConfig, parse_eval_config
from paravt.eval.episode_out import write_episode
from paravt.eval.metrics import record_trace
from paravt.eval.synth_tasks import answer_kind_of_type
from paravt.eval.traces import SampleTrace, TraceWriter


def _cli_flags(argv: list[str]) -> tuple[str | None, str]:
    """`--output_path` and `--model_args` of the running lmms-eval command line, if any."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--output_path", default=None)
    parser.add_argument("--model_args", default="")
    known, _ = parser.parse_known_args(argv)
    return known.output_path, known.model_args or ""


def default_trace_path(config: EvalConfig, argv: list[str] | None = None) -> Path:
    """Where traces go.

    `traces=FILE.jsonl` is used as is; `traces=DIR` gets a time-stamped file inside. Otherwise,
    under the lmms-eval CLI with `--output_path OUT`, the file sits beside the results JSON
    (`OUT/<model name as lmms-eval sanitizes it>/<time>_paravt_traces.jsonl`); without one, in
    `./paravt_traces/`.
    """
    stamp = time.strftime("%Y%m%dT%H%M%S")
    if config.traces:
        target = Path(config.traces).expanduser()
        if target.suffix == ".jsonl":
            return target
        return target / f"{stamp}_paravt_traces.jsonl"
    output_path, model_args = _cli_flags(sys.argv[1:] if argv is None else argv)
    if output_path:
        from lmms_eval.loggers.evaluation_tracker import GeneralConfigTracker
        from lmms_eval.utils import sanitize_model_name

        name = sanitize_model_name(GeneralConfigTracker._get_model_name(model_args))
        return Path(output_path) / name / f"{stamp}_paravt_traces.jsonl"
    return Path("paravt_traces") / f"{stamp}_{config.model_name}.jsonl"


def _video_of(content: Any) -> str | None:
    url = content.get("url") if isinstance(content, dict) else None
    if isinstance(url, dict):  # {"video": path, "video_start": ...} style entries
        url = url.get("video") or url.get("url") or url.get("path")
    return str(url) if url else None


def sample_from_messages(
    messages: list[dict[str, Any]], *, task: str, doc_id: int, doc: dict[str, Any]
) -> VideoQuestion:
    """The video and question of one lmms-eval chat request.

    The video is the sample's own (its first `video` part); the question is the text of the user
    turns, in order, as the task wrote it (options and answer instructions included). Raises
    `ValueError` when the sample has no video.
    """
    videos: list[str] = []
    texts: list[str] = []
    for message in messages:
        if message.get("role") not in ("user", "system"):
            continue
        content = message.get("content")
        if isinstance(content, str):
            texts.append(content)
            continue
        for part in content or []:
            kind = part.get("type")
            if kind == "text":
                texts.append(str(part.get("text", "")))
            elif kind == "video":
                video = _video_of(part)
                if video:
                    videos.append(video)
    if not videos:
        raise ValueError(
            f"{task} doc {doc_id}: the sample has no video part; the paravt model evaluates video "
            "tasks (doc_to_visual must return the video path)"
        )
    kind = answer_kind_of(task, doc)
    structured = doc.get("paravt_question")
    if isinstance(structured, str) and structured:
        # a paravt task that keeps the question apart: the protocol lays it out (options, mode)
        return VideoQuestion(
            key=f"{task}/{doc_id}",
            video=videos[0],
            question=structured,
            options=options_from(doc.get("paravt_options")),
            task=task,
            doc_id=doc_id,
            answer_kind=kind,
            template=True,
        )
    question = "\n".join(t.strip() for t in texts if t.strip())
    return VideoQuestion(
        key=f"{task}/{doc_id}",
        video=videos[0],
        question=question,
        task=task,
        doc_id=doc_id,
        answer_kind=kind,
        template=False,
    )


GROUNDING_TASK_WORDS = ("grounding", "charades", "tvg")


def answer_kind_of(task: str, doc: dict[str, Any]) -> str:
    """`mcq`, `grounding` or `open` for a request: the document's `paravt_answer_kind` when it has
    one, else the kind its `question_type` names (`oe`: open), else `grounding` for task names
    that say so (temporal_grounding_charades, *_tvg), else `mcq` (every other split the paper
    reports is multiple choice). An open question read as `mcq` would be told to answer with a
    letter and, under the paper's protocol, graded on the letter it does not have: 0 every time."""
    kind = doc.get("paravt_answer_kind")
    if kind in ("mcq", "grounding", "open"):
        return str(kind)
    by_type = answer_kind_of_type(doc.get("question_type"))
    if by_type is not None:
        return by_type
    name = task.lower()
    return "grounding" if any(w in name for w in GROUNDING_TASK_WORDS) else "mcq"


class ParaVT(lmms):
    """The ParaVT agent as an lmms-eval chat model. Arguments: see `paravt.eval.config.EvalConfig`."""

    is_simple = False

    def __init__(
        self,
        batch_size: int | str = 1,
        max_batch_size: int | None = None,
        device: str | None = None,
        **model_args: Any,
    ) -> None:
        super().__init__()
        values = dict(model_args)
        values.setdefault("batch_size", int(batch_size) if str(batch_size).isdigit() else 1)
        if device:
            values.setdefault("device", device)
        self.config = parse_eval_config(values)
        self.protocol_line = self.config.protocol_line()
        logger.info(f"paravt: {self.protocol_line}")
        self.agent = EvalAgent(self.config)
        self.trace_path = default_trace_path(self.config)
        self.writer = TraceWriter(self.trace_path, protocol=self.protocol_line)
        # a bounded sample of episodes per task, in the RL runs' schema (the viewer reads it)
        self.episodes_dir = self.trace_path.with_name(self.trace_path.stem + "_episodes")
        self.episodes_written: dict[str, int] = {}
        self.batch_size = self.config.batch_size
        self.device = self.config.device
        logger.info(f"paravt: traces go to {self.trace_path}")

    def generate_until(self, requests: list[Instance]) -> list[str]:
        """Run the agent on every request's video and question; return the answers, in order.

        Over servers the samples run as a rolling pool (`samples_per_server` in flight on each); a local
        checkpoint runs them in lockstep batches of `batch_size`. Anything the task's code raises
        while building a request (`SystemExit` included) makes that sample an errored trace."""
        answers: list[str] = [""] * len(requests)
        samples: list[VideoQuestion] = []
        where: list[int] = []
        docs: list[dict[str, Any]] = []
        pbar = tqdm(total=len(requests), disable=self.rank != 0, desc="paravt agent")
        for n, req in enumerate(requests):
            _, doc_to_messages, _, doc_id, task, split = req.args
            doc = self.task_dict[task][split][doc_id]
            docs.append(doc)
            try:
                messages = doc_to_messages(doc)
                sample = sample_from_messages(messages, task=task, doc_id=doc_id, doc=doc)
            except BaseException as exc:
                if isinstance(exc, KeyboardInterrupt):
                    raise
                trace = SampleTrace(
                    task=task,
                    doc_id=doc_id,
                    video=None,
                    question="",
                    response="",
                    error=f"unreadable request: {type(exc).__name__}: {exc}",
                )
                self._finish(doc, trace)
                pbar.update(1)
                continue
            samples.append(sample)
            where.append(n)

        def done(i: int, trace: SampleTrace) -> None:
            n = where[i]
            self._record_episode(samples[i], trace)
            answers[n] = self._finish(docs[n], trace)
            pbar.update(1)

        self.agent.run(samples, on_done=done)
        pbar.close()
        for line in self.writer.error_lines():
            logger.warning(f"paravt: {line}")
        return answers

    def _record_episode(self, sample: VideoQuestion, trace: SampleTrace) -> None:
        """The first `episodes` samples of each task that ran, as episodes on disk. A failure to
        write one is a warning and ends the recording; the evaluation goes on."""
        written = self.episodes_written.get(trace.task, 0)
        if trace.episode is None or written >= self.config.episodes or self.rank != 0:
            return
        tool_response = self.agent.config_for(sample).tool_response
        try:
            write_episode(self.episodes_dir, trace, sample, tool_response=tool_response)
        except Exception as exc:  # recording must never cost the evaluation
            logger.warning(f"paravt: episodes not recorded from here on ({exc})")
            self.config = self.config.model_copy(update={"episodes": 0})
            return
        self.episodes_written[trace.task] = written + 1
        if written == 0:
            logger.info(
                f"paravt: episodes of {trace.task} go to {self.episodes_dir} (view: paravt-train "
                f"episodes {self.episodes_dir} --html)"
            )

    def _finish(self, doc: dict[str, Any], trace: SampleTrace) -> str:
        trace.episode = None  # token ids and media are not kept for a whole benchmark
        record_trace(doc, trace)
        if trace.error:
            logger.warning(f"paravt: {trace.task} doc {trace.doc_id} errored: {trace.error}")
        self.writer.write([trace])
        return trace.response

    def generate_until_multi_round(self, requests: list[Instance]) -> list[str]:
        raise NotImplementedError(
            "paravt runs its own multi-turn agent loop inside generate_until; multi-round tasks "
            "(output_type generate_until_multi_round) are not supported"
        )

    def loglikelihood(self, requests: list[Instance]) -> list[tuple[float, bool]]:
        raise NotImplementedError(
            "paravt is a generative agent; loglikelihood tasks (multiple_choice output_type) are "
            "not supported. Use the generate_until variant of the task."
        )
