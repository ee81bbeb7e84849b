"""Execution: the runs this process executes in the background, from RUN_STARTED to their settlement.

The executor never writes to a socket: it appends events to the run's stream and the stored thread, and every HTTP
response tails that stream, so a client that goes away never stops a run. The invocation that started a run still
waits for it to settle (``wait_settled``): on Lambda, nothing may be left to do once its response ends.

While a run executes, its ``RunWatch`` renews the thread's lease with one write per heartbeat and listens for a
cancel on the run's Redis control stream (or, with Redis down, in the heartbeat's answer from the ledger). The run
stops itself shortly before its invocation's deadline and ends with RUN_ERROR ``run_deadline``. However it ended, it
settles in the order ``shared.runs.settlement`` gives, unless a takeover ended it already (then it writes nothing
more).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import weakref
from collections import OrderedDict
from typing import Protocol, runtime_checkable

from shared.executors.context import RunContext, RunHeadStart
from shared.limits.gate import LimitGate
from shared.models import Origin, RunStatus
from shared.ports import EventStream, RunLedger
from shared.run_events.coalescing import Coalescing
from shared.run_events.emitter import RunEmitter, run_started
from shared.run_results import ExecutionResult
from shared.runs.local_feed import RunFeed
from shared.runs.settlement import Outcome, Settlement, finished, shutdown_outcome
from shared.runs.slices import SlicePolicy, SliceTicket
from shared.runs.watch import RunWatch
from shared.stream_keys import run_stream_key, thread_stream_key
from shared.tracing.runs import finish_run

logger = logging.getLogger(__name__)

HEARTBEAT_S = 10.0
"""How often a run renews its lease: one DynamoDB write each time."""
RUN_DEADLINE_MARGIN_S = 20.0
"""A run ends this long before its invocation's deadline: enough to settle (flush, ledger, publish: bounded)."""
_REMEMBERED_SETTLED = 1024

RunKey = tuple[str, str]
"""(tenant id, run id)."""


# A role, not a port: implemented in-process by the executors (worker, memory), not by an adapter.
class Executor(Protocol):
    step_name: str

    async def execute(self, ctx: RunContext, emitter: RunEmitter) -> ExecutionResult: ...


@runtime_checkable
class HeadStarting(Protocol):
    """An executor that can give a run a head start beside admission: ``head_start`` builds a new value for each run
    (``RunHeadStart``, shared/executors/context.py) and keeps nothing; the service runs it beside admission and hands
    it to ``execute`` in ``ctx.head_start``."""

    def head_start(self, ctx: RunContext) -> RunHeadStart: ...


class BackgroundRuns:
    """The runs this process executes: started after admission, cancelled locally, settled in order."""

    def __init__(
        self,
        runs: RunLedger,
        stream: EventStream,
        settlement: Settlement,
        *,
        heartbeat_s: float = HEARTBEAT_S,
        run_deadline_margin_s: float = RUN_DEADLINE_MARGIN_S,
        coalescing: Coalescing | None = None,
        slices: SlicePolicy | None = None,
        limits: LimitGate | None = None,
    ) -> None:
        """``coalescing``: how each run's deltas are batched (None: every delta written as it comes); ``slices``:
        where a run that reaches its slice's end goes on (None: a run ends at its invocation's deadline)."""
        self._slices = slices
        self._limits = limits
        self._runs = runs
        self._coalescing = coalescing
        self._stream = stream
        self._settlement = settlement
        self._heartbeat_s = heartbeat_s
        self._run_deadline_margin_s = run_deadline_margin_s
        self._tasks: set[asyncio.Task[None]] = set()
        self._by_run: dict[RunKey, asyncio.Task[None]] = {}
        self._inner: dict[RunKey, asyncio.Task[ExecutionResult]] = {}
        self._past_deadline: set[RunKey] = set()
        self._cancel_sent: weakref.WeakSet[asyncio.Task[ExecutionResult]] = weakref.WeakSet()
        # Runs this process settled lately: a reader of one of them that finds no terminal event on the stream
        # knows it will not come (the stream lost it) and rebuilds it from the ledger without waiting.
        self._settled: OrderedDict[RunKey, None] = OrderedDict()
        # The entries of each run executing here, for the responses here that tail it (shared.runs.local_feed).
        self._feeds: dict[RunKey, RunFeed] = {}

    async def start(
        self, ctx: RunContext, executor: Executor, *, claim_thread: bool, deadline: float, continuing: bool = False
    ) -> None:
        """RUN_STARTED on the run's stream, then the executor in the background until ``deadline`` (epoch s).
        ``continuing``: a later slice of a run (``shared.runs.slices``): no second RUN_STARTED, and the run's
        stream is appended to, not cleared."""
        tenant = ctx.identity.tenant_id
        now = time.time()
        ctx = dataclasses.replace(
            ctx,
            run_started_at=ctx.run_started_at or now,
            slice_ends_at=self._slice_end(ctx, claim_thread, deadline, now),
        )
        key = (tenant, ctx.run_id)
        feed = self._feeds[key] = RunFeed()
        emitter = RunEmitter(
            self._stream,
            run_stream_key(tenant, ctx.run_id),
            thread_key=thread_stream_key(tenant, ctx.thread_id),
            run_id=ctx.run_id,
            hidden=ctx.meta.hidden_from_user,
            # The run is new, so anything already under its stream key is stale (a ledger restored from a backup,
            # an expired run record): RUN_STARTED's write drops it first (one pipeline), before any reader of
            # this run tails the stream, so none replays another run's events.
            clear_run_stream=not continuing,
            written=feed,
            coalescing=self._coalescing,
        )
        # The executor starts first, so its way to the model request (context, prompt) overlaps RUN_STARTED's
        # write; RUN_STARTED is still the run's first event (queued before the executor runs), and the caller
        # tails the stream only once it is written. Both tasks are created here, the run's first, so they take
        # their first steps in the same pass of the event loop (the run's starts its watch before the executor
        # runs): a pass of a loop busy with other runs costs milliseconds.
        task = asyncio.create_task(self._execute(ctx, claim_thread, deadline, emitter), name=f"run:{ctx.run_id}")
        self._inner[key] = asyncio.create_task(executor.execute(ctx, emitter), name=f"executor:{ctx.run_id}")
        self._tasks.add(task)
        self._by_run[key] = task
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(lambda _t: self._by_run.pop(key, None))
        task.add_done_callback(lambda _t: self._end_feed(key))
        task.add_done_callback(lambda _t: self._drop_executor(key))
        if not continuing:
            await emitter.emit(run_started(ctx.thread_id, ctx.run_id, ctx.meta))

    def _slice_end(self, ctx: RunContext, claim_thread: bool, deadline: float, now: float) -> float | None:
        """When the run's slice ends, for a run that goes on in a new invocation then: chat runs (an automation's
        invocation waits for its run to end, and a memory run holds no thread), when something can start the next
        slice; None for any other run (it ends at its invocation's deadline)."""
        if self._slices is None or not claim_thread or ctx.meta.origin is not Origin.CHAT:
            return None
        return self._slices.ends_at(deadline, now)

    def feed(self, tenant_id: str, run_id: str) -> RunFeed | None:
        """The entries of the run executing here, as written to its stream; None for a run not executing here."""
        return self._feeds.get((tenant_id, run_id))

    def _end_feed(self, key: RunKey) -> None:
        feed = self._feeds.pop(key, None)
        if feed is not None:
            feed.close()  # its readers take what is left, then go on from the stream if no terminal event came

    def is_running(self, tenant_id: str, run_id: str) -> bool:
        """Whether the run executes (or settles) in this process now."""
        return (tenant_id, run_id) in self._by_run

    def settled_here(self, tenant_id: str, run_id: str) -> bool:
        """Whether this process settled the run lately (its terminal event went out, or never will)."""
        return (tenant_id, run_id) in self._settled

    async def wait_settled(self, tenant_id: str, run_id: str) -> None:
        """Wait until this process's run has settled (terminal event on the stream), shielded from the caller's
        own cancellation: the invocation that started a run owns it until then. Returns at once for a run that
        executes elsewhere or has already settled."""
        task = self._by_run.get((tenant_id, run_id))
        if task is not None:
            await asyncio.shield(task)

    async def wait_idle(self) -> None:
        """Wait for every background run of this process (tests and graceful shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def cancel_local(self, tenant_id: str, run_id: str, reason: str | None = None) -> None:
        """Stop the run's executor if it runs here; it winds down (its salvage) and the run settles as cancelled.
        ``reason`` (``"interrupted"``) travels as the cancellation's message, for the executor's salvage."""
        inner = self._inner.get((tenant_id, run_id))
        # Once only: a second cancel would interrupt the executor's own wind-down (its salvage of the turn). Our
        # own record, not ``Task.cancelling()``, which libraries' cancel scopes inside the executor also move.
        if inner is not None and not inner.done() and inner not in self._cancel_sent:
            self._cancel_sent.add(inner)
            inner.cancel(reason)

    def _deadline_reached(self, tenant_id: str, run_id: str) -> None:
        logger.warning("run reached its deadline; ending it", extra={"run_id": run_id})
        self._past_deadline.add((tenant_id, run_id))
        self.cancel_local(tenant_id, run_id)

    def _drop_executor(self, key: RunKey) -> None:
        """The run's task ended: its executor goes with it (it ended already, unless the run's task was cancelled
        before its first step)."""
        inner = self._inner.pop(key, None)
        if inner is not None and not inner.done():
            inner.cancel()

    async def _execute(self, ctx: RunContext, claim_thread: bool, deadline: float, emitter: RunEmitter) -> None:
        tenant = ctx.identity.tenant_id
        started = time.monotonic()
        watch = self._watch(ctx, emitter)
        watch.start()
        # The run ends itself before its invocation's deadline, so the platform never kills it mid-way.
        stop_in = max(0.0, deadline - self._run_deadline_margin_s - time.time())
        timer = asyncio.get_running_loop().call_later(stop_in, self._deadline_reached, tenant, ctx.run_id)
        outcome = shutdown_outcome()
        try:
            outcome = await self._outcome(ctx, emitter)
        finally:
            timer.cancel()
            self._past_deadline.discard((tenant, ctx.run_id))
            await watch.stop()
            # Logged before the run settles: after its terminal event this environment may be frozen.
            _log_finished(ctx, outcome, watch, emitter, started)
            if watch.state.lost:
                # The takeover ended this run and closed its stream; nothing of this process may follow.
                emitter.discard()
                finish_run("taken_over", None, outcome.result.usage if outcome.result else [])
                self._remember_settled(tenant, ctx.run_id)
            elif outcome.status is RunStatus.RUNNING and outcome.result is not None:
                if not await self._hand_on(ctx, emitter, outcome.result):
                    outcome = await self._settlement.out_of_time(ctx, emitter, outcome.result)
                    await self._settlement.settle(ctx, emitter, claim_thread, outcome)
                    self._remember_settled(tenant, ctx.run_id)
            else:
                await self._settlement.settle(ctx, emitter, claim_thread, outcome)
                self._remember_settled(tenant, ctx.run_id)

    async def _hand_on(self, ctx: RunContext, emitter: RunEmitter, result: ExecutionResult) -> bool:
        """The slice ended between two steps: every event on the stream, then the ticket to the next invocation
        (``shared.runs.slices``). The run keeps its thread and its ``running`` record; no terminal event. False
        when it cannot go on (the ticket was refused): the caller ends it as out of time."""
        assert self._slices is not None
        tenant = ctx.identity.tenant_id
        await emitter.flush(self._settlement.flush_timeout_s)
        reservation = self._limits.hand_on(tenant, ctx.run_id) if self._limits is not None else None
        ticket = SliceTicket.of(ctx, result.usage, reservation)
        try:
            await self._slices.continue_run(ticket.model_dump(mode="json"))
        except Exception:
            logger.error("could not hand the run on to its next slice", extra={"run_id": ctx.run_id}, exc_info=True)
            if reservation is not None and self._limits is not None:
                self._limits.hold(reservation)
            return False
        logger.info("run goes on in a new invocation", extra={"run_id": ctx.run_id, "slice": ticket.slice_index})
        return True

    def _watch(self, ctx: RunContext, emitter: RunEmitter) -> RunWatch:
        tenant = ctx.identity.tenant_id
        return RunWatch(
            tenant_id=tenant,
            run_id=ctx.run_id,
            beat=lambda: self._runs.heartbeat(tenant, ctx.run_id, last_stream_id=emitter.last_id),
            stream=self._stream,
            heartbeat_s=self._heartbeat_s,
            on_cancel=lambda reason=None: self.cancel_local(tenant, ctx.run_id, reason),
        )

    async def _outcome(self, ctx: RunContext, emitter: RunEmitter) -> Outcome:
        """Wait for the executor (started beside this run's task), and say how the run ended: finished,
        cancelled, out of time or failed."""
        key = (ctx.identity.tenant_id, ctx.run_id)
        try:
            inner = self._inner[key]
            try:
                result = await self._executed(inner)
            finally:
                self._inner.pop(key, None)
            # The usage of the run's earlier slices is counted with this one's, once (shared.runs.slices).
            result.usage[:0] = ctx.prior_usage
            if key in self._past_deadline:
                return await self._settlement.out_of_time(ctx, emitter, result)
            if result.suspended and not result.cancelled and self._slices is not None:
                return Outcome(status=RunStatus.RUNNING, result=result)
            return finished(ctx, result)
        except Exception as exc:
            return await self._settlement.failed(ctx, emitter, exc)

    @staticmethod
    async def _executed(inner: asyncio.Task[ExecutionResult]) -> ExecutionResult:
        """The executor's result; a cancelled executor that did not wind down by itself counts as cancelled (a
        cancel or the deadline stopped it), unless this run's own task is being cancelled (shutdown)."""
        try:
            return await inner
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if not inner.cancelled() or (current is not None and current.cancelling()):
                raise
            result = ExecutionResult()
            result.cancelled = True
            return result

    def _remember_settled(self, tenant_id: str, run_id: str) -> None:
        self._settled[(tenant_id, run_id)] = None
        while len(self._settled) > _REMEMBERED_SETTLED:
            self._settled.popitem(last=False)


def _log_finished(ctx: RunContext, outcome: Outcome, watch: RunWatch, emitter: RunEmitter, started: float) -> None:
    logger.info(
        "run finished",
        extra={
            "run_id": ctx.run_id,
            "thread_id": ctx.thread_id,
            "tenant_id": ctx.identity.tenant_id,
            "profile": ctx.profile.name,
            "rollout_id": ctx.meta.rollout_id,
            "rollout_side": ctx.meta.rollout_side,
            "executor": ctx.meta.executor.value,
            "status": "taken_over" if watch.state.lost else outcome.status.value,
            "duration_ms": round((time.monotonic() - started) * 1000),
            "stream_failures": emitter.stream_failures,
            "heartbeats": watch.state.beats,
        },
    )
