"""Where the generation requests of concurrently running episodes meet the engine.

`Scheduler` is the runtime's (`paravt.core.runtime`) only route to an `Engine`: a server engine
(`continuous_batching = True`) gets each request as soon as it is ready, up to the bound on
requests in flight; an in-process engine gets whatever requests are waiting as one batch; the
lockstep schedule waits for every live episode. Kept apart from the episode loop, which only
awaits `Scheduler.generate`.
"""

from __future__ import annotations

import asyncio

from paravt.core.agent_config import AgentConfig, SamplingParams
from paravt.core.episode import Engine, Generated, Trajectory


class Request:
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


class Scheduler:
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
        self.pending: list[Request] = []
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
        self.pending.append(Request(owner, trajectories, sampling, future))
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

    def _take(self) -> list[Request]:
        ordered = sorted(self.pending, key=lambda r: r.owner)
        batch: list[Request] = []
        size = 0
        for request in ordered:
            if batch and size + len(request.trajectories) > self.limit:
                break
            batch.append(request)
            size += len(request.trajectories)
        taken = {id(r) for r in batch}
        self.pending = [r for r in self.pending if id(r) not in taken]
        return batch

    async def _run_batch(self, batch: list[Request]) -> None:
        groups: dict[str, list[Request]] = {}
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
