"""The agent runtime: main agent turns, parallel `crop_video` dispatch, sub-agents, and the `Episode`.

Each episode moves on its own: generate -> parse -> dispatch the turn's calls (its toolbox decodes
them together) -> in `subagent` mode one generation request for all its sub-agents -> tool responses
appended -> next turn. The last turn is told to answer and its tool calls are not executed. Engine
requests of concurrently running episodes meet in a scheduler: a server engine
(`continuous_batching = True`) gets each request as soon as it is ready, up to a bound on requests
in flight; an in-process engine gets whatever requests are waiting as one batch (a micro-batching
queue). `AgentConfig.schedule = "lockstep"` advances all episodes turn by turn together instead.

Token in, token out: a trajectory's next prompt is its previous token ids, plus the generated ids as
sampled, plus the continuation (tool responses) tokenized once by the engine. Nothing is re-tokenized
from decoded text, so a trainer scores exactly the tokens that were sampled. The runtime knows
nothing about torch or video; it talks to an `Engine` and a `Toolbox`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from paravt.core.agent_config import (
    AgentConfig,
    SamplingParams,
)
from paravt.core.agent_protocol import PARAVT_PROTOCOL, AgentProtocol
from paravt.core.parser import ParsedResponse, ToolCall, parse_response
from paravt.core.prompts import THINK_PREFIX, build_subagent_prompt
from paravt.core.protocol import CropVideoArgs, Message, ToolOutput

FinishReason = Literal["stop", "length"]


# --------------------------------------------------------------------------------------------------
# What engines take and return


@dataclass
class Encoded:
    """A tokenized piece of prompt: token ids plus the engine's processed media for its images."""

    token_ids: list[int]
    media: list[Any] = field(default_factory=list)


@dataclass
class Generated:
    """One generation as sampled: text, token ids and their log-probabilities."""

    text: str
    token_ids: list[int]
    logprobs: list[float] | None = None
    finish_reason: FinishReason = "stop"
    # tokens generated as the server counted them (`usage.completion_tokens`), for text engines
    # that get no token ids back; None: count `token_ids`
    usage_tokens: int | None = None

    @property
    def num_tokens(self) -> int:
        return (
            len(self.token_ids)
            if self.token_ids or self.usage_tokens is None
            else self.usage_tokens
        )


@dataclass
class Trajectory:
    """One conversation as token ids, with a loss mask that is 1 exactly on generated tokens.

    `messages` mirrors the same conversation as chat messages (for text-only engines and for
    people); `media` holds the engine's processed images in prompt order.
    """

    role: Literal["main", "subagent"]
    messages: list[Message] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    media: list[Any] = field(default_factory=list)
    turn: int | None = None  # sub-agents: the main turn that spawned them
    call_index: int | None = None  # sub-agents: the call they answered
    assistant_prefix: str = ""  # text the engine appended after the generation prompt

    def add_prompt(self, encoded: Encoded, messages: Sequence[Message]) -> None:
        self.messages.extend(messages)
        self.token_ids.extend(encoded.token_ids)
        self.loss_mask.extend([0] * len(encoded.token_ids))
        self.logprobs.extend([0.0] * len(encoded.token_ids))
        self.media.extend(encoded.media)

    def add_generated(self, out: Generated) -> None:
        self.messages.append(Message("assistant", self.assistant_prefix + out.text))
        self.token_ids.extend(out.token_ids)
        self.loss_mask.extend([1] * len(out.token_ids))
        lps = out.logprobs if out.logprobs is not None else [0.0] * len(out.token_ids)
        self.logprobs.extend(lps)

    @property
    def num_generated(self) -> int:
        return sum(self.loss_mask)


@runtime_checkable
class Engine(Protocol):
    """Batched generation over trajectories; tokenization through the model's own chat template."""

    def encode_prompt(self, messages: Sequence[Message], *, assistant_prefix: str = "") -> Encoded:
        """A conversation's first prompt, ending with the generation prompt and `assistant_prefix`."""
        ...

    def encode_continuation(
        self, messages: Sequence[Message], *, previous: Generated, assistant_prefix: str = ""
    ) -> Encoded:
        """What follows a generation: closes the assistant turn if `previous` did not, renders
        `messages` (tool responses, notes), then the generation prompt and `assistant_prefix`."""
        ...

    async def generate(
        self, trajectories: Sequence[Trajectory], sampling: SamplingParams
    ) -> list[Generated]:
        """Continue every trajectory once (one batch)."""
        ...


@runtime_checkable
class Toolbox(Protocol):
    """The tools of one sample. It owns the sample's video; the model never names a file."""

    async def execute(self, calls: Sequence[CropVideoArgs]) -> list[ToolOutput]:
        """Run every validated call of one turn (together), returning one output per call, in order.
        A failing call returns `ToolOutput.failure(...)`; it must not fail the others."""
        ...


# --------------------------------------------------------------------------------------------------
# What the runtime records


@dataclass
class CallRecord:
    index: int  # position among the turn's call attempts
    name: str | None
    arguments: dict[str, Any]
    executed: bool
    window_s: tuple[float, float] | None = None
    num_frames: int = 0
    error: str | None = None
    summary: str | None = None
    note: str = ""
    # every change made to the request (argument validation's and the tool's), one sentence each;
    # each is also stated in the tool response the model reads
    clamps: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data (windows as lists)."""
        return {
            "index": self.index,
            "name": self.name,
            "arguments": self.arguments,
            "executed": self.executed,
            "window_s": list(self.window_s) if self.window_s else None,
            "num_frames": self.num_frames,
            "error": self.error,
            "note": self.note,
            "clamps": list(self.clamps),
            "summary": self.summary,
        }


@dataclass
class TurnRecord:
    turn: int
    response: str
    parsed: ParsedResponse
    finish_reason: FinishReason
    num_tokens: int
    calls: list[CallRecord] = field(default_factory=list)
    generate_s: float = 0.0
    tools_s: float = 0.0
    subagent_s: float = 0.0

    @property
    def num_calls(self) -> int:
        return len(self.calls)

    @property
    def num_executed(self) -> int:
        return sum(c.executed for c in self.calls)

    @property
    def errors(self) -> list[str]:
        return [c.error for c in self.calls if c.error]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data for traces and people: think, answer, issues, calls and timings."""
        return {
            "turn": self.turn,
            "response": self.response,
            "think": self.parsed.think,
            "answer": self.parsed.answer,
            "finish_reason": self.finish_reason,
            "num_tokens": self.num_tokens,
            "issues": [{"kind": i.kind.value, "message": i.message} for i in self.parsed.issues],
            "calls": [c.to_dict() for c in self.calls],
            "timings_s": {
                "generate": round(self.generate_s, 4),
                "tools": round(self.tools_s, 4),
                "subagents": round(self.subagent_s, 4),
            },
        }


@dataclass
class Episode:
    """Everything about one agent run; training consumes it unchanged."""

    key: str
    main: Trajectory
    subagents: list[Trajectory] = field(default_factory=list)
    turns: list[TurnRecord] = field(default_factory=list)
    forced_answer: bool = False  # the last turn was told to answer
    total_s: float = 0.0

    @property
    def final(self) -> ParsedResponse:
        return self.turns[-1].parsed

    @property
    def answer(self) -> str | None:
        return self.final.answer

    @property
    def num_tool_calls(self) -> int:
        """Valid calls that were executed, over all turns."""
        return sum(t.num_executed for t in self.turns)

    @property
    def num_call_attempts(self) -> int:
        return sum(t.num_calls for t in self.turns)

    @property
    def num_tool_errors(self) -> int:
        return sum(len(t.errors) for t in self.turns)

    @property
    def calls_per_turn(self) -> list[int]:
        return [t.num_calls for t in self.turns]

    @property
    def tool_responses_ok(self) -> int:
        return sum(1 for t in self.turns for c in t.calls if c.executed and c.error is None)


@dataclass
class AgentTask:
    """One sample: its first prompt (see `prompts.build_main_prompt`), its toolbox, its question.

    `answer_kind` (`mcq`, `grounding`, `open`) picks the protocol's final-answer note."""

    key: str
    messages: list[Message]
    toolbox: Toolbox
    question: str
    answer_kind: str = "mcq"


# --------------------------------------------------------------------------------------------------
# The loop


@dataclass
class _State:
    task: AgentTask
    episode: Episode
    last: Generated | None = None
    done: bool = False
    started: float = field(default_factory=time.perf_counter)


def _plan_calls(
    calls: list[ToolCall], config: AgentConfig
) -> tuple[list[CallRecord], list[tuple[int, CropVideoArgs]]]:
    """Decide which attempts run; every attempt not run gets an error naming why."""
    records: list[CallRecord] = []
    to_run: list[tuple[int, CropVideoArgs]] = []
    cap = 1 if config.dispatch == "sequential" else config.max_parallel
    for i, call in enumerate(calls):
        rec = CallRecord(index=i, name=call.name, arguments=dict(call.arguments), executed=False)
        if not call.ok or not isinstance(call.args, CropVideoArgs):
            rec.error = call.error or "invalid tool call"
        elif len(to_run) >= cap:
            rec.error = (
                "not executed: sequential dispatch runs one call per turn; call again next turn"
                if config.dispatch == "sequential"
                else f"not executed: at most {config.max_parallel} calls per turn (max_parallel); "
                f"this was call {i + 1} of {len(calls)}, call it again next turn"
            )
        else:
            rec.executed = True
            to_run.append((i, call.args))
        records.append(rec)
    return records, to_run


def _with_argument_clamps(output: ToolOutput, args: CropVideoArgs) -> ToolOutput:
    """`output` stating the clamps argument validation made (`args.clamps`) that the toolbox did
    not state itself (the crop tool does; a custom toolbox may not), first in its text."""
    missing = [c for c in getattr(args, "clamps", ()) if c not in output.clamps]
    if not missing:
        return output
    text = " ".join([*missing, output.text]) if output.text else " ".join(missing)
    return dataclasses.replace(output, text=text, clamps=[*missing, *output.clamps])


async def _run_toolbox(
    toolbox: Toolbox, calls: list[CropVideoArgs], timeout_s: float
) -> list[ToolOutput]:
    if not calls:
        return []
    try:
        outputs = await asyncio.wait_for(toolbox.execute(calls), timeout_s)
    except asyncio.TimeoutError:
        return [ToolOutput.failure(f"crop_video timed out after {timeout_s:g} s")] * len(calls)
    except Exception as exc:  # a broken tool must not end the episode
        return [ToolOutput.failure(f"crop_video failed: {type(exc).__name__}: {exc}")] * len(calls)
    if len(outputs) != len(calls):
        msg = f"crop_video returned {len(outputs)} outputs for {len(calls)} calls"
        return [ToolOutput.failure(msg)] * len(calls)
    return list(outputs)


def _summary_of(text: str) -> str:
    parsed = parse_response(text)
    if parsed.answer:
        return parsed.answer
    # No answer block: keep what was said, without tags.
    body = "".join(b.content for b in parsed.blocks) or text
    return body.strip() or "(no summary)"


class _Request:
    """Trajectories of one episode waiting for one generation (with one sampling setting)."""

    __slots__ = ("future", "owner", "sampling", "trajectories")

    def __init__(
        self,
        owner: int,
        trajectories: list[Trajectory],
        sampling: SamplingParams,
        future: asyncio.Future[list[Generated]],
    ) -> None:
        self.owner = owner
        self.trajectories = trajectories
        self.sampling = sampling
        self.future = future


class _Scheduler:
    """Routes the generation requests of concurrently running episodes to the engine.

    - `per_request` (async schedule, an engine with `continuous_batching = True`, i.e. a server
      that batches on its side): every trajectory is its own engine call, at most
      `max_requests_in_flight` open at once; no episode waits for another.
    - `gather` (async schedule, an in-process engine): a micro-batching queue. Once the requests
      waiting have stopped growing (the other runnable episodes have had their turn of the event
      loop), up to `max_requests_in_flight` trajectories go in one engine call per sampling
      setting, ordered by episode; one batch at a time, and requests arriving meanwhile wait for
      the next.
    - `lockstep`: a batch goes only when every unfinished episode is waiting (a barrier), so all
      episodes advance turn by turn together, the slowest generation holding everyone.
    """

    _SETTLE_TICKS = 8  # event-loop passes without a new request before a gathered batch goes
    _MAX_SETTLE_TICKS = 1000

    def __init__(self, engine: Engine, config: AgentConfig, live: int) -> None:
        self.engine = engine
        if config.schedule == "lockstep":
            self.mode = "lockstep"
        elif getattr(engine, "continuous_batching", False):
            self.mode = "per_request"
        else:
            self.mode = "gather"
        self.limit = config.max_requests_in_flight
        self.live = live
        self.pending: list[_Request] = []
        self.wakeup = asyncio.Event()
        self.slots = asyncio.Semaphore(self.limit)

    @property
    def needs_worker(self) -> bool:
        return self.mode != "per_request"

    async def generate(
        self, owner: int, trajectories: list[Trajectory], sampling: SamplingParams
    ) -> list[Generated]:
        """Continue `trajectories` (all of episode `owner`) once."""
        if not trajectories:
            return []
        if self.mode == "per_request":

            async def one(trajectory: Trajectory) -> Generated:
                async with self.slots:
                    outs = await self.engine.generate([trajectory], sampling)
                return outs[0]

            return list(await asyncio.gather(*(one(t) for t in trajectories)))
        future: asyncio.Future[list[Generated]] = asyncio.get_running_loop().create_future()
        self.pending.append(_Request(owner, trajectories, sampling, future))
        self.wakeup.set()
        return await future

    def finished(self) -> None:
        """An episode ended (the lockstep barrier no longer waits for it)."""
        self.live -= 1
        self.wakeup.set()

    async def run(self) -> None:
        """The batching worker (modes `gather` and `lockstep`); cancelled when all episodes end."""
        while True:
            await self.wakeup.wait()
            self.wakeup.clear()
            if not self.pending:
                continue
            if self.mode == "lockstep":
                if len({r.owner for r in self.pending}) < self.live:
                    continue
                batch, self.pending = self.pending, []
            else:
                await self._settle()
                batch = self._take()
            await self._run_batch(sorted(batch, key=lambda r: r.owner))
            if self.pending:
                self.wakeup.set()

    async def _settle(self) -> None:
        seen, quiet = len(self.pending), 0
        for _ in range(self._MAX_SETTLE_TICKS):
            if quiet >= self._SETTLE_TICKS or self._size() >= self.limit:
                return
            await asyncio.sleep(0)
            quiet = quiet + 1 if len(self.pending) == seen else 0
            seen = len(self.pending)

    def _size(self) -> int:
        return sum(len(r.trajectories) for r in self.pending)

    def _take(self) -> list[_Request]:
        ordered = sorted(self.pending, key=lambda r: r.owner)
        batch: list[_Request] = []
        size = 0
        for request in ordered:
            if batch and size + len(request.trajectories) > self.limit:
                break
            batch.append(request)
            size += len(request.trajectories)
        taken = {id(r) for r in batch}
        self.pending = [r for r in self.pending if id(r) not in taken]
        return batch

    async def _run_batch(self, batch: list[_Request]) -> None:
        groups: dict[str, list[_Request]] = {}
        for request in batch:
            groups.setdefault(request.sampling.model_dump_json(), []).append(request)
        for members in groups.values():
            trajectories = [t for r in members for t in r.trajectories]
            try:
                outs = await self.engine.generate(trajectories, members[0].sampling)
                if len(outs) != len(trajectories):
                    raise RuntimeError(
                        f"{type(self.engine).__name__}.generate returned {len(outs)} results "
                        f"for {len(trajectories)} trajectories"
                    )
            except Exception as exc:  # the episodes waiting on this batch raise it
                for r in members:
                    if not r.future.done():
                        r.future.set_exception(exc)
                continue
            k = 0
            for r in members:
                n = len(r.trajectories)
                if not r.future.done():
                    r.future.set_result(list(outs[k : k + n]))
                k += n


async def run_episodes(
    tasks: Sequence[AgentTask],
    engine: Engine,
    config: AgentConfig | None = None,
    protocol: AgentProtocol | None = None,
) -> list[Episode]:
    """Run a batch of agent episodes; returns their `Episode` records in task order.

    With `config.schedule == "async"` (default) every episode moves on its own (generate -> its
    calls -> its sub-agents -> next turn): a server engine gets each request as soon as it is
    ready, an in-process engine batches whatever requests are waiting together. `"lockstep"`
    advances all episodes turn by turn together. The records are the same either way.

    `protocol` (default: paravt's) says how calls are read, how their results and the final-answer
    note are written, and the forced request's token limit; `config` bounds turns and calls.
    An exception in one episode (an engine error) cancels the others and is raised."""
    config = config or AgentConfig()
    protocol = protocol or PARAVT_PROTOCOL
    prefix = THINK_PREFIX if config.think_prefix else ""
    states: list[_State] = []
    for task in tasks:
        main = Trajectory("main", assistant_prefix=prefix)
        main.add_prompt(engine.encode_prompt(task.messages, assistant_prefix=prefix), task.messages)
        states.append(_State(task, Episode(task.key, main)))
    if not states:
        return []

    scheduler = _Scheduler(engine, config, live=len(states))
    worker = asyncio.ensure_future(scheduler.run()) if scheduler.needs_worker else None
    running = [
        asyncio.ensure_future(_run_episode(i, s, engine, scheduler, config, protocol, prefix))
        for i, s in enumerate(states)
    ]
    try:
        await asyncio.wait(running, return_when=asyncio.FIRST_EXCEPTION)
        errors = [t.exception() for t in running if t.done() and not t.cancelled()]
        first = next((e for e in errors if e is not None), None)
        if first is not None:
            raise first
    finally:
        leftovers = [t for t in running if not t.done()]
        if worker is not None:
            leftovers.append(worker)
        for t in leftovers:
            t.cancel()
        if leftovers:
            await asyncio.gather(*leftovers, return_exceptions=True)
    return [s.episode for s in states]


async def _run_episode(
    index: int,
    state: _State,
    engine: Engine,
    scheduler: _Scheduler,
    config: AgentConfig,
    protocol: AgentProtocol,
    prefix: str,
) -> None:
    """One episode, turn by turn: generate -> parse -> its calls -> its sub-agents -> next prompt."""
    try:
        for turn in range(1, config.max_turns + 1):
            sampling = config.sampling
            if turn == config.max_turns:  # a forced final request may have its own token limit
                limit = protocol.final_max_new_tokens(state.task.answer_kind)  # type: ignore[arg-type]
                if limit is not None:
                    sampling = sampling.model_copy(update={"max_new_tokens": limit})
            t0 = time.perf_counter()
            (out,) = await scheduler.generate(index, [state.episode.main], sampling)
            generate_s = time.perf_counter() - t0

            state.last = out
            state.episode.main.add_generated(out)
            response = prefix + out.text
            parsed = parse_response(response, max_num_frames=config.max_num_frames)
            calls = protocol.read_calls(response)
            calls = parsed.tool_calls if calls is None else calls
            record = TurnRecord(
                turn, response, parsed, out.finish_reason, out.num_tokens, generate_s=generate_s
            )
            state.episode.turns.append(record)
            if turn == config.max_turns or not calls:
                state.done = True
                for i, call in enumerate(calls):  # last turn: recorded, not run
                    record.calls.append(
                        CallRecord(
                            i,
                            call.name,
                            dict(call.arguments),
                            executed=False,
                            error=call.error or "not executed: no tool turns left",
                        )
                    )
                break
            record.calls, run = _plan_calls(calls, config)

            t0 = time.perf_counter()
            outputs = await _run_toolbox(
                state.task.toolbox, [a for _, a in run], config.tool_timeout_s
            )
            record.tools_s = time.perf_counter() - t0
            by_index = {i: _with_argument_clamps(o, a) for (i, a), o in zip(run, outputs)}
            for i, tool_out in by_index.items():
                rec = record.calls[i]
                rec.error, rec.window_s = tool_out.error, tool_out.window_s
                rec.num_frames, rec.note = len(tool_out.frames), tool_out.text
                rec.clamps = list(tool_out.clamps)

            summaries: dict[int, str] = {}
            if config.tool_response == "subagent":
                t0 = time.perf_counter()
                summaries = await _run_subagents(
                    index, state, by_index, engine, scheduler, config, turn
                )
                record.subagent_s = time.perf_counter() - t0

            args_of = dict(run)
            results: list[tuple[CropVideoArgs | None, ToolOutput, str | None, bool]] = []
            for rec in record.calls:
                if rec.index in by_index:
                    summary = summaries.get(rec.index)
                    rec.summary = summary
                    results.append((args_of[rec.index], by_index[rec.index], summary, True))
                else:
                    results.append((None, ToolOutput.failure(rec.error or ""), None, False))
            messages = protocol.tool_messages(results)
            note = protocol.final_note(state.task.answer_kind)  # type: ignore[arg-type]
            if turn + 1 == config.max_turns and note:
                messages.append(Message("user", note))
                state.episode.forced_answer = True
            encoded = engine.encode_continuation(messages, previous=out, assistant_prefix=prefix)
            state.episode.main.add_prompt(encoded, messages)
    finally:
        state.episode.total_s = time.perf_counter() - state.started
        scheduler.finished()


async def _run_subagents(
    index: int,
    state: _State,
    by_index: dict[int, ToolOutput],
    engine: Engine,
    scheduler: _Scheduler,
    config: AgentConfig,
    turn: int,
) -> dict[int, str]:
    """One generation request for every successful call of the episode's turn; summaries by call."""
    jobs: list[tuple[int, Trajectory]] = []
    for i, output in sorted(by_index.items()):
        if not output.ok or output.window_s is None:
            continue
        messages = build_subagent_prompt(state.task.question, output.window_s, output.frames)
        traj = Trajectory("subagent", turn=turn, call_index=i)
        traj.add_prompt(engine.encode_prompt(messages), messages)
        jobs.append((i, traj))
    if not jobs:
        return {}
    outs = await scheduler.generate(index, [t for _, t in jobs], config.subagent_sampling)
    summaries: dict[int, str] = {}
    for (i, traj), out in zip(jobs, outs):
        traj.add_generated(out)
        state.episode.subagents.append(traj)
        summaries[i] = _summary_of(out.text)
    return summaries


def run_episodes_sync(
    tasks: Sequence[AgentTask], engine: Engine, config: AgentConfig | None = None
) -> list[Episode]:
    """`run_episodes` for callers without an event loop.

    The episodes come back through a list, not as the main task's result: on the main thread
    `asyncio.run` restores its SIGINT handler through `signal.getsignal`, whose enum lookup of the
    handler (a partial holding the finished task) formats the task's repr, result included, and
    the repr of every episode (frames, token ids, tensors) costs ~20 ms per call."""
    episodes: list[Episode] = []

    async def run() -> None:
        episodes.extend(await run_episodes(tasks, engine, config))

    asyncio.run(run())
    return episodes
