"""A second message while a run is active on its thread ("double texting"): the multitask strategy decides.

- ``reject``: the new run is refused with ``409 thread_busy`` and nothing is stored (the client decides).
- ``enqueue``: the new run waits its turn in the thread's run queue (``shared.runs.queueing``).
- ``interrupt``: the active run is cancelled through the cancel path that works across environments
  (``RunService.cancel``: the ledger flag and the run's Redis control signal); it winds down as on any cancel (its
  stream ends with ``RUN_FINISHED`` ``outcome: {"type": "cancelled"}``, its partial answer is stored marked
  ``partial`` / ``ended_by: "interrupted"`` (the reason rides on the cancel signal; ``shared.run_results``), its
  dangling tool calls get synthetic ``cancelled`` results) and
  releases the thread; the new run is then admitted and its window holds both user messages. The new POST never
  sees ``thread_busy`` while the old run winds down: it waits (up to the lease plus a margin, so a run whose
  process died is taken over instead) and is admitted. The interruption is audited (``run_interrupted``).

The strategy comes from the request (``forwardedProps.multitaskStrategy``) or else the profile
(``run_policy.multitask_strategy``). Front-end tool calls left pending on the thread are answered by the new
message's synthetic results (``shared.runs.pending_calls``) whatever the strategy.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from shared.errors import Conflict, InvalidRequest, NotFound
from shared.models import AuditRecord, Identity, Run, Thread
from shared.ports import AuditLog
from shared.runs.claims import Admission

logger = logging.getLogger(__name__)

POLL_S = 0.05
"""How often an interrupting admission looks whether the interrupted run has released the thread (one read)."""
RETRY_BUSY_S = 1.0
"""How often it tries the admission while the thread still looks held (a holder whose lease expired is taken over)."""
WAIT_MARGIN_S = 5.0
"""An interrupting admission waits at most the lease plus this for the thread (a dead holder is taken over)."""
MULTITASK_STRATEGIES: tuple[str, ...] = ("reject", "interrupt", "enqueue")
"""``enqueue`` is ``shared.runs.queueing``'s."""


class ActiveRunLookup(Protocol):
    """The one threads call an interrupting admission makes (``ThreadStore`` has it): who holds the thread."""

    async def get_thread(self, identity: Identity, thread_id: str) -> Thread: ...


def strategy_of(forwarded_props: Any, default: str) -> str:
    """The request's ``forwardedProps.multitaskStrategy``, else ``default`` (the profile's
    ``run_policy.multitask_strategy``); 422 ``invalid_request`` for an unknown value."""
    asked = forwarded_props.get("multitaskStrategy") if isinstance(forwarded_props, dict) else None
    if asked is None:
        return default
    if asked not in MULTITASK_STRATEGIES:
        raise InvalidRequest(
            "unknown multitask strategy",
            code="invalid_request",
            details=[
                {
                    "loc": ["body", "forwardedProps", "multitaskStrategy"],
                    "msg": f"must be one of {', '.join(MULTITASK_STRATEGIES)}",
                    "type": "enum",
                }
            ],
        )
    return str(asked)


def _busy(exc: Exception) -> bool:
    return isinstance(exc, Conflict) and exc.code == "thread_busy"


class Interrupting:
    """Admits a run with the ``interrupt`` strategy (the module docstring says what that does)."""

    def __init__(
        self,
        threads: ActiveRunLookup,
        audit: AuditLog,
        cancel: Callable[[Identity, str], Awaitable[Run]],
        *,
        wait_s: float,
    ) -> None:
        self._threads = threads
        self._audit = audit
        self._cancel = cancel
        self._wait_s = wait_s

    async def admit(
        self, identity: Identity, thread_id: str, run_id: str, attempt: Callable[[], Awaitable[Admission]]
    ) -> Admission:
        try:
            return await attempt()
        except Conflict as exc:
            if not _busy(exc):
                raise
            refused = exc
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._wait_s
        interrupted: set[str] = set()
        next_try = loop.time() + RETRY_BUSY_S
        while loop.time() < deadline:
            active = (await self._threads.get_thread(identity, thread_id)).active_run_id
            if active is not None and active != run_id and active not in interrupted:
                if not await self._interrupt(identity, thread_id, active, run_id):
                    raise refused  # not a run this caller may stop (e.g. a hidden automation run)
                interrupted.add(active)
            if active is None or loop.time() >= next_try:
                next_try = loop.time() + RETRY_BUSY_S
                try:
                    return await attempt()
                except Conflict as exc:
                    if not _busy(exc):
                        raise
            await asyncio.sleep(POLL_S)
        raise refused

    async def interrupt_holder(self, identity: Identity, thread_id: str, run_id: str) -> bool:
        """Ask the run holding the thread to stop for ``run_id`` (a background run, which then waits in the queue
        for the thread); True when none holds it or it was asked, False when it is not one the caller may stop."""
        active = (await self._threads.get_thread(identity, thread_id)).active_run_id
        if active is None or active == run_id:
            return True
        return await self._interrupt(identity, thread_id, active, run_id)

    async def _interrupt(self, identity: Identity, thread_id: str, active: str, run_id: str) -> bool:
        try:
            await self._cancel(identity, active)
        except NotFound:
            return False
        logger.info("interrupting the active run for a new message", extra={"run_id": active, "by_run_id": run_id})
        await self._audit.record(
            AuditRecord(
                kind="run_interrupted",
                tenant_id=identity.tenant_id,
                thread_id=thread_id,
                run_id=active,
                user_id=identity.user_id,
                details={"interrupted_by_run_id": run_id, "strategy": "interrupt"},
            )
        )
        return True
