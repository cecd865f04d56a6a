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
import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from paravt.core.agent_config import (
    AgentConfig,
    SamplingParams,
)
from paravt.core.agent_protocol import PARAVT_PROTOCOL, AgentProtocol
from paravt.core.episode import (
    AgentTask,
    CallRecord,
    Encoded,
    Engine,
    Episode,
    FinishReason,
    Generated,
    Toolbox,
    Trajectory,
    TurnRecord,
)
from paravt.core.parser import ToolCall, parse_response
from paravt.core.prompts import THINK_PREFIX, build_subagent_prompt
from paravt.core.protocol import CropVideoArgs, Message, ToolOutput
from paravt.core.scheduler import Scheduler

# the records and interfaces live in `paravt.core.episode`; re-exported here, where the runtime's
# users have always found them
__all__ = [
    "AgentConfig",
    "AgentTask",
    "CallRecord",
    "Encoded",
    "Engine",
    "Episode",
    "FinishReason",
    "Generated",
    "SamplingParams",
    "Toolbox",
    "Trajectory",
    "TurnRecord",
    "request_seed",
    "run_episodes",
    "run_episodes_sync",
    "sample_key",
]

# --------------------------------------------------------------------------------------------------
# The loop


@dataclass
class _State:
    task: AgentTask
    episode: Episode
    last: Generated | None = None
    done: bool = False
    started: float = field(default_factory=time.perf_counter)


def sample_key(
    index: int, role: str, turn: int | None = None, call_index: int | None = None
) -> int:
    """The stable sampling key of a request (`Trajectory.sample_key`): episode `index` in its
    `run_episodes` call, the role and, for a sub-agent, the main turn and call that spawned it.
    A hash of their text (blake2b, not Python's salted `hash`), the same in every process; the
    main trajectory keeps one key over its turns, whose positions differ."""
    text = f"paravt/{index}/{role}/{turn}/{call_index}"
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1  # 63 bits


def request_seed(seed: int, trajectory: Trajectory) -> int:
    """The seed a server request of `trajectory` carries under the run's sampling `seed`.

    A server draws a request's tokens from its seed and its prompt alone, so the rollouts of one
    GRPO group (same prompt) sent with the same seed come back identical, and the group's
    advantages are all zero. Each request therefore gets its own seed, a hash of the run's seed,
    the trajectory's `sample_key` (the episode's place in its call, the role, the sub-agent's
    turn and call; `id(trajectory)` is never used: it would not reproduce) and the trajectory's
    length so far (a main agent's later turns differ from its first). Without a key the length
    alone separates nothing, so a keyless trajectory keeps the run's seed."""
    if trajectory.sample_key is None:
        return seed
    text = f"paravt-request/{seed}/{trajectory.sample_key}/{len(trajectory.token_ids)}"
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 33  # 31 bits: every server's seed type takes it


def _plan_calls(
    calls: list[ToolCall], config: AgentConfig, *, cut_at: int | None = None
) -> tuple[list[CallRecord], list[tuple[int, CropVideoArgs]]]:
    """Decide which attempts run; every attempt not run gets an error naming why. `cut_at`: the
    token limit that cut the turn (None: the turn ended by itself); with
    `cut_turn_calls="skip"` no call of a cut turn runs."""
    records: list[CallRecord] = []
    to_run: list[tuple[int, CropVideoArgs]] = []
    cap = 1 if config.dispatch == "sequential" else config.max_parallel
    skip_all = cut_at is not None and config.cut_turn_calls == "skip"
    for i, call in enumerate(calls):
        rec = CallRecord(index=i, name=call.name, arguments=dict(call.arguments), executed=False)
        if skip_all:
            rec.error = (
                f"not executed: the turn was cut by its token limit ({cut_at} tokens) before it "
                "ended; a turn's calls run only when it ends by itself"
            )
        elif not call.ok or not isinstance(call.args, CropVideoArgs):
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
    for index, task in enumerate(tasks):
        main = Trajectory("main", assistant_prefix=prefix, sample_key=sample_key(index, "main"))
        main.add_prompt(engine.encode_prompt(task.messages, assistant_prefix=prefix), task.messages)
        states.append(_State(task, Episode(task.key, main)))
    if not states:
        return []

    scheduler = Scheduler(engine, config, live=len(states))
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
    scheduler: Scheduler,
    config: AgentConfig,
    protocol: AgentProtocol,
    prefix: str,
) -> None:
    """One episode, turn by turn: generate -> parse -> its calls -> its sub-agents -> next prompt."""
    main = state.episode.main
    try:
        # main-context tokens at most (None: no limit)
        cap = _context_cap(len(main.token_ids), config, state.task.key)
        for turn in range(1, config.max_turns + 1):
            sampling = config.sampling
            if turn == config.max_turns:  # a forced final request may have its own token limit
                limit = protocol.final_max_new_tokens(state.task.answer_kind)  # type: ignore[arg-type]
                if limit is not None:
                    sampling = sampling.model_copy(update={"max_new_tokens": limit})
            if cap is not None:  # what is left of the budget (>= 1: checked below)
                left = cap - len(main.token_ids)
                if left < sampling.max_new_tokens:
                    sampling = sampling.model_copy(update={"max_new_tokens": left})
            t0 = time.perf_counter()
            (out,) = await scheduler.generate(index, [main], sampling)
            generate_s = time.perf_counter() - t0

            state.last = out
            main.add_generated(out)
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
            cut_at = sampling.max_new_tokens if out.finish_reason == "length" else None
            record.calls, run = _plan_calls(calls, config, cut_at=cut_at)

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
            if cap is not None and len(main.token_ids) + len(encoded.token_ids) >= cap:
                # no room left to generate after the tool responses: the episode ends here, as
                # verl's tool agent loop ends when its response_length is reached
                state.episode.budget_exhausted = state.done = True
                break
            main.add_prompt(encoded, messages)
    finally:
        state.episode.total_s = time.perf_counter() - state.started
        scheduler.finished()


def _context_cap(prompt_tokens: int, config: AgentConfig, key: str) -> int | None:
    """The main context's length limit in tokens (prompt included), from the episode budget
    (counted after the prompt) and the context budget (counted from the start); None: no limit."""
    caps = []
    if config.max_episode_tokens is not None:
        caps.append(prompt_tokens + config.max_episode_tokens)
    if config.max_context_tokens is not None:
        if prompt_tokens >= config.max_context_tokens:
            raise ValueError(
                f"episode {key!r}: its first prompt is {prompt_tokens} tokens, which leaves no room "
                f"to generate in max_context_tokens={config.max_context_tokens}; raise "
                "max_context_tokens or give the prompt fewer overview frames"
            )
        caps.append(config.max_context_tokens)
    return min(caps) if caps else None


async def _run_subagents(
    index: int,
    state: _State,
    by_index: dict[int, ToolOutput],
    engine: Engine,
    scheduler: Scheduler,
    config: AgentConfig,
    turn: int,
) -> dict[int, str]:
    """One generation request for every successful call of the episode's turn; summaries by call."""
    jobs: list[tuple[int, Trajectory]] = []
    for i, output in sorted(by_index.items()):
        if not output.ok or output.window_s is None:
            continue
        messages = build_subagent_prompt(state.task.question, output.window_s, output.frames)
        traj = Trajectory(
            "subagent", turn=turn, call_index=i, sample_key=sample_key(index, "subagent", turn, i)
        )
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
