"""The ``enqueue`` multitask strategy: a message sent while a run is active waits its turn, in order, and then runs.

- **Admitted at once.** A request that finds its thread busy (or others already waiting) is stored in the thread's
  run queue (``shared.ports.run_queue``): who sent it and its body. The store numbers the entries, so the order is
  first in, first out by admission, across instances. A thread holds at most the profile's
  ``run_policy.queue_depth`` queued runs; beyond that the request is refused with ``409 queue_full`` and nothing
  is stored.
- **Started when the thread is free.** The request that queued a run waits for it (its response sends the SSE
  pings meanwhile): whenever its entry is first in the queue and the thread is free (or its holder's lease expired,
  which admission takes over), it admits the run as any run is admitted (claim, pending front-end calls settled,
  limits reserved), removes the entry and streams the run. Two starters of one entry are harmless: the second
  admission of the same run id and body attaches to the first.
- **The client may leave.** The waiting is not the response's: it goes on when the client disconnects (the response
  of the request that queued a run ends only once that run has settled, ``OwnedRunResponse``), and the run's events
  can be followed with ``GET /runs/{runId}/events`` (pings until it starts, ``Enqueuing.follow``).
- **Hand-over.** The request that queued a run waits for it until shortly before its own invocation's deadline
  (``waiter_until``, recorded in the entry); its stream then ends without a terminal event (the resume hint:
  follow ``GET /runs/{runId}/events``). After that the run is started by whoever next finds the thread free with
  that entry first: the request whose run just ended (``hand_over``, after its own run settled), or the request of
  another queued run on the thread while it waits. Each starts it in its own invocation and waits for it to settle.
- **Limits.** A queued run holds no concurrency slot and no token reservation while it waits: it reserves them
  when it is admitted. Refused then (``429``, or a front-end tool result that no longer answers a pending call), it
  is taken out of the queue and its stream ends with ``RUN_ERROR`` ``run_not_started`` (the refusal's code in the
  message).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Protocol

from ag_ui.core import RunErrorEvent

from shared.errors import AgentError, Conflict, NotFound
from shared.event_json import dumps
from shared.models import Identity, Run, RunStatus, Thread
from shared.ports import StreamEntry
from shared.ports.run_queue import QueuedRun, QueuedRunRef, RunQueue, queued_run
from shared.run_events.emitter import event_to_dict
from shared.runs.claims import Admission
from shared.runs.queued_ends import RunEndedHook, record_ended

logger = logging.getLogger(__name__)

POLL_S = 0.5
"""How often a waiting request looks at its thread's queue and claim (a query and up to two reads): a queued run
starts at most this long after its thread is freed."""
RETRY_BUSY_S = 1.0
"""How often it tries the admission while the thread still looks held (a holder whose lease expired is taken over)."""
START_RESERVE_S = 60.0
"""A waiting request stops trying to start its run this long before its invocation's deadline (the run needs time
to run there); later, whoever frees the thread starts it (the module docstring's hand-over)."""
HAND_OVER_GRACE_S = 2 * POLL_S
"""A waiter is trusted to start its own run until this long before its ``waiter_until``: it polls once more after."""
DRAIN_POLL_S = 1.0
"""How often a drain (``ThreadQueue.drain``: the background-run starter) looks whether a busy thread was freed (one
read); it tries the admission itself every ``DRAIN_RETRY_S`` (a holder whose lease expired is taken over)."""
DRAIN_RETRY_S = 10.0


class QueueThreads(Protocol):
    """The one threads call the queue makes (``ThreadStore`` has it): who holds the thread."""

    async def get_thread(self, identity: Identity, thread_id: str) -> Thread: ...


class QueueRuns(Protocol):
    """The ledger calls the queue makes (``RunLedger`` has them): whether a queued run was admitted already, and
    the record of one that will never start (a background run refused at its turn, or cancelled while queued)."""

    async def get_run(self, tenant_id: str, run_id: str) -> Run | None: ...

    async def create_run(self, run: Run) -> tuple[Run, bool]: ...


StartQueued = Callable[[Identity, bytes, float | None], Awaitable[Admission]]
"""Admits a queued request (its caller and body) as any run is admitted, with no multitask strategy, in the
invocation (its deadline, epoch seconds; None: unknown) of the request that starts it."""
TailRun = Callable[[str, str, float | None], AsyncIterator[StreamEntry | None]]
"""``tail(tenant_id, run_id, deadline)``: the run's events until its terminal event (``RunService.tail_run``)."""
WaitSettled = Callable[[str, str], Awaitable[None]]


def _busy(exc: Exception) -> bool:
    return isinstance(exc, Conflict) and exc.code == "thread_busy"


RUN_NOT_STARTED = "run_not_started"
"""The ``RUN_ERROR`` code of a queued run refused when its turn came (it never started, so it has no other event)."""


def refused_event(run_id: str, thread_id: str, exc: AgentError) -> StreamEntry:
    """The terminal event of a queued run refused at its admission (not on any stream: the run never started, so
    its entry has no id), encoded once. It names its run and thread (``runId``, ``threadId``) as ``RUN_FINISHED``
    does, and carries ``metadata.runId`` as every event."""
    event = RunErrorEvent(
        message=f"The queued message could not start when its turn came ({exc.code}).",
        code=RUN_NOT_STARTED,
        usage=[],
        metadata={"runId": run_id},
        timestamp=int(time.time() * 1000),
        runId=run_id,
        threadId=thread_id,
    )
    data = event_to_dict(event)
    return StreamEntry(id="", event=data, json=dumps(data))


class QueuedTurn:
    """A queued run as its own request follows it: the waiting (a task of its own, so it outlives the response),
    then the run's events."""

    def __init__(self, queue: ThreadQueue, identity: Identity, run_id: str, position: int, until: float) -> None:
        self.run_id = run_id
        self.position = position
        self.refused: AgentError | None = None
        self._queue = queue
        self._identity = identity
        self._until = until
        self._waiting: asyncio.Task[bool] = asyncio.create_task(queue.wait_for_turn(self, until))

    async def started(self) -> bool:
        """Whether the run started (here or elsewhere) before this request's waiting ended."""
        return await asyncio.shield(self._waiting)

    def entries(
        self, tail: TailRun, *, deadline: float | None, ping_interval_s: float
    ) -> AsyncIterator[StreamEntry | None]:
        """The response's entries: a ping (None) every ``ping_interval_s`` while waiting, then the run's events;
        if the waiting ends before the run started, nothing more (the client follows ``GET /runs/{runId}/events``)."""
        return self._entries(tail, deadline, ping_interval_s)

    async def _entries(
        self, tail: TailRun, deadline: float | None, ping_interval_s: float
    ) -> AsyncIterator[StreamEntry | None]:
        while not self._waiting.done():
            await asyncio.wait({self._waiting}, timeout=ping_interval_s)
            if not self._waiting.done():
                yield None
        if self.refused is not None:
            yield refused_event(self.run_id, self._queue.thread_id, self.refused)
            return
        if not self._waiting.result():
            return
        async for entry in tail(self._identity.tenant_id, self.run_id, deadline):
            yield entry

    async def settled(self, wait_settled: WaitSettled) -> None:
        """Wait (shielded) for the waiting, the run if it started here, and the runs this request started for
        others; then hand the thread over to the next queued run if its request has gone."""
        started = await self.started()
        await wait_settled(self._identity.tenant_id, self.run_id)
        await self._queue.settle_started(wait_settled)
        if started:
            await self._queue.hand_over(until=self._until, wait_settled=wait_settled)


class ThreadQueue:
    """One thread's queue as a request sees it: its entries, and the starting of the first one."""

    def __init__(
        self,
        queue: RunQueue,
        threads: QueueThreads,
        runs: QueueRuns,
        start: StartQueued,
        tenant_id: str,
        thread_id: str,
        deadline: float | None = None,
        on_ended: RunEndedHook | None = None,
    ):
        self._on_ended = on_ended
        self._queue = queue
        self._threads = threads
        self._runs = runs
        self._start = start
        self._deadline = deadline
        """The deadline of the invocation this request runs in: the runs it starts end before it."""
        self.tenant_id = tenant_id
        self.thread_id = thread_id
        self._started_here: list[str] = []
        self.started_for_others: list[str] = []
        """Every queued run this request (or drain) started for another request, in order."""

    async def wait_for_turn(self, turn: QueuedTurn, until: float) -> bool:
        """Start ``turn``'s run when it is first and the thread free; True once it started (here or elsewhere)."""
        next_try = 0.0
        while True:
            last_look = time.time() >= until
            try:
                state = await self._look(turn, retry_busy=time.monotonic() >= next_try)
            except AgentError as exc:
                turn.refused = exc
                return False
            except Exception:
                logger.warning("could not look at a thread's queue", extra={"run_id": turn.run_id}, exc_info=True)
                state = "waiting"
            if state == "started":
                return True
            if state == "tried":
                next_try = time.monotonic() + RETRY_BUSY_S
            if last_look:
                logger.info("a queued run's request ends before its turn", extra={"run_id": turn.run_id})
                return False
            await asyncio.sleep(POLL_S)

    async def _look(self, turn: QueuedTurn, *, retry_busy: bool) -> str:
        """One look: ``started`` (the run exists), ``tried`` (the thread was busy), else ``waiting``."""
        entries = await self._queue.entries(self.tenant_id, self.thread_id)
        if all(e.run_id != turn.run_id for e in entries):
            if await self._runs.get_run(self.tenant_id, turn.run_id) is not None:
                return "started"
            raise Conflict("the queued run was refused when its turn came", code=RUN_NOT_STARTED)
        head = entries[0]
        if head.run_id != turn.run_id and head.waiter_until - HAND_OVER_GRACE_S > time.time():
            return "waiting"  # its own request starts it
        if await self._runs.get_run(self.tenant_id, head.run_id) is not None:
            await self._queue.remove(self.tenant_id, self.thread_id, head.run_id)  # its starter stopped short
            return "waiting"
        holder = (await self._threads.get_thread(_owner(head, self.tenant_id), self.thread_id)).active_run_id
        if holder is not None and not retry_busy:
            return "waiting"
        return await self._start_first(head, mine=head.run_id == turn.run_id)

    async def _start_first(self, head: QueuedRun, *, mine: bool) -> str:
        """Admit the first queued run; ``tried`` when the thread is still busy. A refusal of someone else's queued
        run takes it out of the queue (its own request, gone, reads ``run_not_started``); of ours, raises it."""
        try:
            admission = await self._start(_owner(head, self.tenant_id), head.body, self._deadline)
        except AgentError as exc:
            if _busy(exc):
                return "tried"
            removed = await self._queue.remove(self.tenant_id, self.thread_id, head.run_id)
            logger.warning("a queued run was refused at its turn", extra={"run_id": head.run_id, "code": exc.code})
            if mine:
                raise
            if removed and not isinstance(exc, NotFound):
                await self._record_ended(head, RunStatus.FAILED, RUN_NOT_STARTED)
            return "waiting"
        await self._queue.remove(self.tenant_id, self.thread_id, head.run_id)
        if not mine:
            self._started_here.append(admission.run.run_id)
            self.started_for_others.append(admission.run.run_id)
            logger.info("started a queued run whose request had gone", extra={"run_id": head.run_id})
            return "waiting"
        return "started"

    async def hand_over(self, *, until: float, wait_settled: WaitSettled) -> None:
        """After a run on the thread ended: start the first queued run if its request has gone, wait for it to
        settle, and go on while there is time (this invocation now owns those runs)."""
        while time.time() < until:
            entries = await self._queue.entries(self.tenant_id, self.thread_id)
            if not entries or entries[0].waiter_until - HAND_OVER_GRACE_S > time.time():
                return
            head = entries[0]
            if await self._runs.get_run(self.tenant_id, head.run_id) is not None:
                await self._queue.remove(self.tenant_id, self.thread_id, head.run_id)
                continue
            if await self._start_first(head, mine=False) == "tried":
                return  # another run holds the thread: it hands over when it ends
            await self.settle_started(wait_settled)

    async def drain(self, *, until: float, wait_settled: WaitSettled) -> bool:
        """Start the thread's queued runs that no request waits to start (background runs, and queued runs whose
        request has gone), first in first out, each once the thread is free, and wait for each to settle, until
        ``until`` (epoch seconds). True when nothing is left for this drain to start (the queue is empty, or its
        first run's own request starts it); False when time ran out with runs still queued (start a new drain)."""
        next_try = 0.0
        while time.time() < until:
            entries = await self._queue.entries(self.tenant_id, self.thread_id)
            if not entries:
                return True
            head = entries[0]
            if head.waiter_until - HAND_OVER_GRACE_S > time.time():
                return True  # its own request starts it, and hands over to the next one when it has ended
            if await self._runs.get_run(self.tenant_id, head.run_id) is not None:
                await self._queue.remove(self.tenant_id, self.thread_id, head.run_id)
                continue
            if time.monotonic() < next_try and await self._held(head):
                await asyncio.sleep(DRAIN_POLL_S)
                continue
            if await self._start_first(head, mine=False) == "tried":
                next_try = time.monotonic() + DRAIN_RETRY_S
                await asyncio.sleep(DRAIN_POLL_S)
                continue
            await self.settle_started(wait_settled)
        return False

    async def _held(self, head: QueuedRun) -> bool:
        """Whether a run holds the thread (a thread that is not the entry's owner's reads as free: its admission
        then refuses it)."""
        try:
            thread = await self._threads.get_thread(_owner(head, self.tenant_id), self.thread_id)
        except NotFound:
            return False
        return thread.active_run_id is not None

    async def _record_ended(self, entry: QueuedRun, status: RunStatus, error_code: str | None) -> None:
        await record_ended(self._runs, self.tenant_id, self.thread_id, entry, status, error_code, self._on_ended)

    async def cancel(self, run_id: str) -> bool:
        """Take a queued run out of the queue for its owner's cancel, and record it ``cancelled``; False when it is
        no longer queued (it started meanwhile: cancel the run)."""
        entry = next((e for e in await self._queue.entries(self.tenant_id, self.thread_id) if e.run_id == run_id), None)
        if entry is None or not await self._queue.remove(self.tenant_id, self.thread_id, run_id):
            return False
        await self._record_ended(entry, RunStatus.CANCELLED, None)
        logger.info("a queued run was cancelled", extra={"run_id": run_id})
        return True

    async def settle_started(self, wait_settled: WaitSettled) -> None:
        """Wait for the runs this request started for others to settle."""
        while self._started_here:
            await wait_settled(self.tenant_id, self._started_here.pop(0))


def _owner(entry: QueuedRun, tenant_id: str) -> Identity:
    return Identity(tenant_id=tenant_id, user_id=entry.user_id, scopes=frozenset(entry.scopes))


class Enqueuing:
    """Admits a run with the ``enqueue`` strategy (the module docstring says what that does)."""

    def __init__(
        self,
        queue: RunQueue,
        threads: QueueThreads,
        runs: QueueRuns,
        start: StartQueued,
        *,
        start_reserve_s: float = START_RESERVE_S,
        on_ended: RunEndedHook | None = None,
    ) -> None:
        self._on_ended = on_ended
        self._queue = queue
        self._threads = threads
        self._runs = runs
        self._start = start
        self._start_reserve_s = start_reserve_s

    def thread_queue(self, tenant_id: str, thread_id: str, deadline: float | None = None) -> ThreadQueue:
        """The thread's queue as a request in the invocation ending at ``deadline`` sees it."""
        return ThreadQueue(
            self._queue, self._threads, self._runs, self._start, tenant_id, thread_id, deadline, self._on_ended
        )

    async def queued_run(self, identity: Identity, run_id: str) -> QueuedRunRef | None:
        """The caller's queued run of that id (None when not queued, or not the caller's)."""
        ref = await self._queue.find(identity.tenant_id, run_id)
        return ref if ref is not None and ref.user_id == identity.user_id else None

    async def cancel_queued(self, identity: Identity, run_id: str) -> bool:
        """Cancel the caller's run while it is still queued (``ThreadQueue.cancel``); False when it is not queued."""
        ref = await self.queued_run(identity, run_id)
        if ref is None:
            return False
        return await self.thread_queue(identity.tenant_id, ref.thread_id).cancel(run_id)

    async def follow(
        self, identity: Identity, run_id: str, tail: TailRun, *, deadline: float, ping_interval_s: float
    ) -> AsyncIterator[StreamEntry | None]:
        """A reader of a queued run (``GET /runs/{runId}/events``): a ping (None) every ``ping_interval_s`` until
        it starts, then its events; nothing more when it leaves the queue without starting, or when the reader's
        ``deadline`` (epoch seconds, the tail's margin taken) comes first."""
        tenant = identity.tenant_id
        next_ping = time.monotonic() + ping_interval_s
        while time.time() < deadline:
            if await self._runs.get_run(tenant, run_id) is not None:
                async for entry in tail(tenant, run_id, None):
                    yield entry
                return
            if await self._queue.find(tenant, run_id) is None and await self._runs.get_run(tenant, run_id) is None:
                return  # refused at its turn: its own request reported it
            await asyncio.sleep(POLL_S)
            if time.monotonic() >= next_ping:
                next_ping = time.monotonic() + ping_interval_s
                yield None

    def waiter_until(self, deadline: float) -> float:
        """Until when a request started now waits to start its queued run itself (epoch seconds)."""
        return max(time.time(), deadline - self._start_reserve_s)

    async def admit(
        self,
        identity: Identity,
        thread_id: str,
        run_id: str,
        body: bytes,
        *,
        depth: int,
        deadline: float,
        attempt: Callable[[], Awaitable[Admission]],
    ) -> Admission | QueuedTurn:
        """Admit the run now if its thread is free and nobody waits; else queue it (``queue_full`` beyond
        ``depth``). A retry of a run that started attaches to it; of a queued one, follows it."""
        tenant = identity.tenant_id
        entries = await self._queue.entries(tenant, thread_id)
        until = self.waiter_until(deadline)
        queued = next((p for p, e in enumerate(entries, start=1) if e.run_id == run_id), None)
        if queued is not None:
            return QueuedTurn(self.thread_queue(tenant, thread_id, deadline), identity, run_id, queued, until)
        if not entries or await self._runs.get_run(tenant, run_id) is not None:
            try:
                return await attempt()
            except Conflict as exc:
                if not _busy(exc):
                    raise
        else:
            await self._threads.get_thread(identity, thread_id)  # someone else's thread: 404, nothing stored
        entry = queued_run(identity.user_id, identity.scopes, run_id, body, waiter_until=until)
        position = await self._queue.enqueue(tenant, thread_id, entry, depth=depth)
        if position is None:
            raise Conflict(f"the thread already has {depth} queued runs", code="queue_full")
        logger.info("run queued", extra={"run_id": run_id, "thread_id": thread_id, "position": position})
        return QueuedTurn(self.thread_queue(tenant, thread_id, deadline), identity, run_id, position, until)
