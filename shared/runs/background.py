"""Background runs (``forwardedProps.background: true``): answered ``202`` at once, executed outside the request.

- **Accepted.** The body is read and checked as any run's (ids, messages, tools, images and files stored, the
  webhook target), then the run joins its thread's run queue (``shared.runs.queueing``) with no request waiting to
  start it, and the queue starter (``QueueStarter``) is asked to drain the thread. Until its admission stores it,
  its status is ``queued`` (the queue's marker) and ``GET /runs/{runId}/events`` pings.
- **Admitted as any run** when its turn comes: limits reserved, the thread claimed, a retry of the same body
  attached. The multitask strategy applies when it is accepted: ``reject`` answers ``409 thread_busy`` when a run
  holds the thread or others wait for it; ``interrupt`` cancels the active run, then waits for the thread;
  ``enqueue`` waits (``409 queue_full`` past the profile's depth). A retry of an accepted ``runId`` answers the
  run's current status, and a different body under it ``409 run_id_conflict``.
- **Executed** where the starter drains the queue: on AWS the background-run function, invoked asynchronously
  (Lambda's own event queue accepts in milliseconds, retries a failed invocation twice, then keeps the event in the
  dead-letter queue); in ``make dev`` a task of the same process (``InProcessQueueStarter``). A drain starts the
  thread's queued runs one after the other, each once the thread is free, and waits for each to settle; when its
  invocation's time runs out with runs still queued, it asks for a new drain.
- **Refused at its turn** (a limit reached meanwhile): recorded ``failed`` with ``run_not_started``, so its status
  says why. **Cancelled while queued:** recorded ``cancelled``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from shared.errors import Conflict, InvalidRequest, NotFound
from shared.models import Identity, Run, Thread
from shared.ports.run_queue import QueueStarter, RunQueue, queued_run
from shared.runs.claims import check_retry
from shared.runs.intake import RunRequest
from shared.runs.status import PublicStatus, public_status

logger = logging.getLogger(__name__)


def is_background(forwarded_props: Any) -> bool:
    """``forwardedProps.background``: True asks for a background run; 422 for anything but a boolean."""
    value = forwarded_props.get("background") if isinstance(forwarded_props, dict) else None
    if value is None:
        return False
    if not isinstance(value, bool):
        raise InvalidRequest(
            "forwardedProps.background must be a boolean",
            code="invalid_request",
            details=[{"loc": ["body", "forwardedProps", "background"], "msg": "must be a boolean", "type": "bool"}],
        )
    return value


@dataclass(frozen=True, slots=True)
class BackgroundAccepted:
    """A background run accepted (or a retry of one): what the ``202`` says."""

    run_id: str
    thread_id: str
    status: PublicStatus


class IntakeThreads(Protocol):
    async def get_thread(self, identity: Identity, thread_id: str) -> Thread: ...


class IntakeRuns(Protocol):
    async def get_run(self, tenant_id: str, run_id: str) -> Run | None: ...


Interrupt = Callable[[Identity, str, str], Awaitable[bool]]
"""``interrupt(identity, thread_id, run_id)``: cancel the run holding the thread for ``run_id`` (True when there
is none, or it was asked to stop; False when the caller may not stop it)."""


class BackgroundIntake:
    """Accepts background runs (the module docstring says how)."""

    def __init__(
        self,
        queue: RunQueue,
        threads: IntakeThreads,
        runs: IntakeRuns,
        starter: QueueStarter,
        interrupt: Interrupt | None = None,
    ) -> None:
        self._queue = queue
        self._threads = threads
        self._runs = runs
        self._starter = starter
        self._interrupt = interrupt

    async def accept(
        self, caller: Identity, request: RunRequest, body: bytes, *, strategy: str, depth: int
    ) -> BackgroundAccepted:
        tenant, thread_id, run_id = caller.tenant_id, request.thread_id, request.run_id
        existing = await self._retry_of(caller, request)
        if existing is not None:
            return existing
        entries = await self._queue.entries(tenant, thread_id)
        thread = await self._thread(caller, thread_id)
        holder = thread.active_run_id if thread is not None else None
        if (holder is not None or entries) and strategy == "reject":
            raise Conflict("another run is active on this thread", code="thread_busy")
        if holder is not None and strategy == "interrupt":
            if self._interrupt is None or not await self._interrupt(caller, thread_id, run_id):
                raise Conflict("another run is active on this thread", code="thread_busy")
        # No request waits to start it (waiter_until 0): whoever drains the thread does.
        entry = queued_run(caller.user_id, caller.scopes, run_id, body, waiter_until=0.0)
        position = await self._queue.enqueue(tenant, thread_id, entry, depth=max(depth, 1))
        if position is None:
            raise Conflict(f"the thread already has {depth} queued runs", code="queue_full")
        try:
            await self._starter.start_queue(tenant, thread_id)
        except Exception:
            # Nothing may be left queued that nobody will start: the entry is taken back and the client retries.
            await self._queue.remove(tenant, thread_id, run_id)
            logger.error("could not start a background run", extra={"run_id": run_id}, exc_info=True)
            raise
        logger.info("background run accepted", extra={"run_id": run_id, "thread_id": thread_id, "position": position})
        return BackgroundAccepted(run_id, thread_id, "queued")

    async def _retry_of(self, caller: Identity, request: RunRequest) -> BackgroundAccepted | None:
        """A retry of a run accepted before (stored, or still queued): its current status; another user's run
        is 404 and the same ``runId`` with another body ``409 run_id_conflict``, as admission answers."""
        run = await self._runs.get_run(caller.tenant_id, request.run_id)
        if run is not None:
            check_retry(run, caller.user_id, request.thread_id, request.body_digest)
            return BackgroundAccepted(run.run_id, run.thread_id, public_status(run))
        ref = await self._queue.find(caller.tenant_id, request.run_id)
        if ref is None:
            return None
        if ref.user_id != caller.user_id:
            raise NotFound("run not found")
        if ref.thread_id != request.thread_id:
            raise Conflict("runId already used with a different body", code="run_id_conflict")
        return BackgroundAccepted(request.run_id, ref.thread_id, "queued")

    async def _thread(self, caller: Identity, thread_id: str) -> Thread | None:
        """The caller's thread; None for a new one. Another user's thread reads the same (its admission refuses
        the run, and nothing of it is recorded)."""
        try:
            return await self._threads.get_thread(caller, thread_id)
        except NotFound:
            return None


Drain = Callable[[str, str], Awaitable[bool]]
"""``drain(tenant_id, thread_id)``: one invocation's drain of the thread's queue; False when its time ran out with
runs still queued (``ThreadQueue.drain``)."""


class InProcessQueueStarter:
    """The ``QueueStarter`` of ``make dev`` and the tests: drains a thread's queue in a task of this process, one
    task per thread (a start asked for while it drains makes it look again when it is done)."""

    def __init__(self, drain: Drain, continue_slice: Callable[[Mapping[str, Any]], Awaitable[None]]) -> None:
        self._drain = drain
        self._continue = continue_slice
        self._tasks: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._again: set[tuple[str, str]] = set()
        self._slices: set[asyncio.Task[None]] = set()

    async def start_queue(self, tenant_id: str, thread_id: str) -> None:
        key = (tenant_id, thread_id)
        if key in self._tasks:
            self._again.add(key)
            return
        self._tasks[key] = asyncio.create_task(self._run(key))

    async def continue_run(self, ticket: Mapping[str, Any]) -> None:
        """The run's next slice in a task of this process, then the thread's queue (the run ended and freed it)."""
        key = (str(ticket["tenant_id"]), str(ticket["thread_id"]))

        async def go_on() -> None:
            try:
                await self._continue(ticket)
            except Exception:
                logger.error("a run's next slice failed", extra={"run_id": ticket.get("run_id")}, exc_info=True)
            await self.start_queue(*key)

        task = asyncio.create_task(go_on())
        self._slices.add(task)
        task.add_done_callback(self._slices.discard)

    async def _run(self, key: tuple[str, str]) -> None:
        try:
            while True:
                self._again.discard(key)
                try:
                    done = await self._drain(*key)
                except Exception:
                    logger.error("a background drain failed", extra={"thread_id": key[1]}, exc_info=True)
                    done = True
                if done and key not in self._again:
                    return
        finally:
            self._tasks.pop(key, None)

    async def wait_idle(self) -> None:
        """Wait until no drain runs (tests, and the local runner's shutdown)."""
        while self._tasks or self._slices:
            await asyncio.gather(*self._tasks.values(), *self._slices, return_exceptions=True)
