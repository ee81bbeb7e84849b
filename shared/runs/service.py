"""The run service: one facade over admission, execution and tailing, for the routes and the Lambda handlers.

- ``shared.runs.admission``: a run is stored with its messages and its thread claimed (or taken over from a run
  whose lease expired), or refused with nothing stored.
- ``shared.runs.execution``: the executor runs in the background, its lease renewed, cancels and its deadline
  heeded; the invocation that started it waits until it has settled.
- ``shared.runs.settlement``: a run ends with its bookkeeping first and its terminal event last.
- ``shared.runs.tailing``: every response reads the run's (or the thread's) stream, with the ledger as the fallback.

Imports go one way: this module uses those, they use ``shared.executors.context``, ``shared.run_events`` and the
ports, and none of them imports this module.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Sequence
from datetime import datetime, timedelta

from shared.errors import NotFound
from shared.executors.context import RunContext, RunHeadStart
from shared.limits.gate import LimitGate
from shared.message_tree import on_branch
from shared.models import Identity, Message, Run, utc_now
from shared.ports import AuditLog, EventStream, RetainedStream, RunLedger, StreamEntry, ThreadStore
from shared.run_events.coalescing import Coalescing
from shared.runs.admission import LEASE_S, STALE_CLAIM_AFTER, Admitter
from shared.runs.claims import Admission
from shared.runs.dead_runs import DeadRuns
from shared.runs.execution import HEARTBEAT_S, RUN_DEADLINE_MARGIN_S, BackgroundRuns, Executor, HeadStarting
from shared.runs.outcomes import RUN_STREAM_TTL_S
from shared.runs.reconciling import check_new_input, reconcile_with_thread
from shared.runs.settlement import AFTER_RUN_TIMEOUT_S, RunFinishedHook, Settlement
from shared.runs.slices import SlicePolicy, SliceTicket
from shared.runs.status import is_visible
from shared.runs.tailing import SETTLE_GRACE_S, TAIL_DEADLINE_MARGIN_S, StreamTail
from shared.runs.watch import CANCEL_SIGNAL
from shared.stream_keys import run_control_key
from shared.tracing.api import span
from shared.tracing.runs import begin_run

logger = logging.getLogger(__name__)

__all__ = ["LEASE_S", "STALE_CLAIM_AFTER", "Admission", "Executor", "RunService"]

FUNCTION_TIMEOUT_S = 900.0
"""The deadline of an invocation that did not say (no Lambda context): the longest a Lambda function runs."""


class RunService:
    """Admits runs, executes them in the background, and tails their events (the module docstring says where)."""

    def __init__(
        self,
        threads: ThreadStore,
        runs: RunLedger,
        audit: AuditLog,
        stream: EventStream,
        *,
        ping_interval_s: float = 15.0,
        heartbeat_s: float = HEARTBEAT_S,
        lease_s: float = LEASE_S,
        on_run_finished: RunFinishedHook | None = None,
        stream_outage_grace_s: float = 5.0,
        flush_timeout_s: float = 10.0,
        settle_grace_s: float = SETTLE_GRACE_S,
        after_run_timeout_s: float = AFTER_RUN_TIMEOUT_S,
        function_timeout_s: float = FUNCTION_TIMEOUT_S,
        run_deadline_margin_s: float = RUN_DEADLINE_MARGIN_S,
        tail_deadline_margin_s: float = TAIL_DEADLINE_MARGIN_S,
        limits: LimitGate | None = None,
        coalescing: Coalescing | None = None,
        slices: SlicePolicy | None = None,
    ) -> None:
        if heartbeat_s >= lease_s:
            raise ValueError("the heartbeat must renew the lease before it expires (heartbeat_s < lease_s)")
        self._runs = runs
        self._stream = stream
        self._function_timeout_s = function_timeout_s
        self._admitter = Admitter(threads, runs, audit, stream, lease=timedelta(seconds=lease_s), limits=limits)
        settlement = Settlement(
            threads,
            runs,
            stream,
            flush_timeout_s=flush_timeout_s,
            after_run_timeout_s=after_run_timeout_s,
            on_run_finished=on_run_finished,
            limits=limits,
        )
        self.background = BackgroundRuns(
            runs,
            stream,
            settlement,
            heartbeat_s=heartbeat_s,
            run_deadline_margin_s=run_deadline_margin_s,
            coalescing=coalescing,
            slices=slices,
            limits=limits,
        )
        self._limits = limits
        self._tail = StreamTail(
            runs,
            stream,
            self.background,
            invocation_deadline=self.invocation_deadline,
            ping_interval_s=ping_interval_s,
            stream_outage_grace_s=stream_outage_grace_s,
            settle_grace_s=settle_grace_s,
            tail_deadline_margin_s=tail_deadline_margin_s,
            dead_runs=DeadRuns(threads, runs, audit, stream, lease=timedelta(seconds=lease_s), limits=limits),
        )

    async def admit(
        self,
        ctx: RunContext,
        *,
        body_digest: str,
        new_messages: Sequence[Message],
        executor: Executor,
        claim_thread: bool = True,
        reconcile: bool = False,
        now: datetime | None = None,
        deadline: float | None = None,
    ) -> Admission:
        """Store the run and the caller's new messages (``shared.runs.admission``), then start the executor in the
        background. ``reconcile``: the new messages are reconciled with the thread's newest ones before they are
        stored (front-end tool results and approvals: ``shared.runs.reconciling``; chat runs), as of ``now`` (an
        approval's expiry; None: the current time). ``deadline``: the invocation's (epoch seconds; None: the function
        timeout from now), which the run ends before. A retry of an
        admitted run attaches to it and starts nothing. The run's span (shared.tracing.runs) is current from here
        on, in the run's tasks too."""
        trace = begin_run(ctx)
        flags = trace.message_flags()
        if flags:
            new_messages = [m.model_copy(update={"flags": {**m.flags, **flags}}) for m in new_messages]
        with trace.active():
            try:
                head = executor.head_start(ctx) if isinstance(executor, HeadStarting) else None
                with span("agent.admission"):
                    reconcile_at = (now or utc_now()) if reconcile else None
                    admission = await self._admit(ctx, head, body_digest, new_messages, claim_thread, reconcile_at)
            except BaseException as exc:
                trace.refused(exc)
                raise
            if not admission.created:
                trace.attached()
                return admission
            history = admission.history if admission.history is not None else ctx.known_history
            ctx = dataclasses.replace(ctx, known_history=history, head_start=head)
            deadline = self.invocation_deadline(deadline)
            await self.background.start(ctx, executor, claim_thread=claim_thread, deadline=deadline)
        return admission

    async def _admit(
        self,
        ctx: RunContext,
        head: RunHeadStart | None,
        body_digest: str,
        new_messages: Sequence[Message],
        claim_thread: bool,
        reconcile_at: datetime | None,
    ) -> Admission:
        """Admission's steps, values in and values out: the claim, the new messages reconciled with what it read (a
        pure step, ``shared.runs.reconciling``), the store. With the run's head start (if it has one) beside them:
        its reads beside the claim, its first model request sent before the store, once the thread as the run will
        find it is known (shared/executors/head_start.py). Both end, or are closed, before this returns when the
        run is refused or attaches to a stored one: nothing is left running after the response."""

        async def admitting() -> Admission:
            claim = await self._admitter.claim(
                ctx,
                body_digest=body_digest,
                new_messages=new_messages,
                claim_thread=claim_thread,
                read_recent=reconcile_at is not None,
            )
            if isinstance(claim, Admission):
                return claim
            if reconcile_at is not None and claim.recent is not None:
                try:
                    check_new_input(ctx, new_messages, claim.fresh, claim.compared)
                    # Pending calls and open approvals are those of the current branch, not of one left behind.
                    branch = on_branch(claim.recent, claim.claimed.leaf_id)
                    claim = claim.with_messages(reconcile_with_thread(ctx, claim.fresh, branch, now=reconcile_at))
                except Exception as exc:
                    return await self._admitter.refuse(claim, exc)
            history = claim.history_once_stored()
            if head is not None and history is not None:
                head.open(history)
            return await self._admitter.store(claim)

        if head is None:
            return await admitting()
        outcome, _ = await asyncio.gather(admitting(), head.read(), return_exceptions=True)
        if isinstance(outcome, BaseException) or not outcome.created:
            await head.discard()
        if isinstance(outcome, BaseException):
            raise outcome
        admission: Admission = outcome
        return admission

    async def continue_run(
        self, ticket: SliceTicket, ctx: RunContext, executor: Executor, *, deadline: float | None
    ) -> None:
        """The next slice of a run that reached its slice's end in another invocation (``shared.runs.slices``):
        its reservation held here, its executor started on the same stream, until this invocation's ``deadline``.
        A ticket for a run that has ended meanwhile (a cancel the sweeper completed, a retried invocation) starts
        nothing."""
        run = await self._runs.get_run(ctx.identity.tenant_id, ctx.run_id)
        if run is None or run.status.is_terminal or self.background.is_running(ctx.identity.tenant_id, ctx.run_id):
            logger.info("a slice ticket for a run that is not waiting for it", extra={"run_id": ctx.run_id})
            return
        reservation = ticket.limits_reservation()
        if reservation is not None and self._limits is not None:
            self._limits.hold(reservation)
        trace = begin_run(ctx)
        with trace.active():
            await self.background.start(
                ctx, executor, claim_thread=True, deadline=self.invocation_deadline(deadline), continuing=True
            )

    async def run_inline(
        self,
        ctx: RunContext,
        *,
        body_digest: str,
        new_messages: Sequence[Message],
        executor: Executor,
        claim_thread: bool = True,
        deadline: float | None = None,
    ) -> Run:
        """Admit a run and wait for it to end (Lambda handlers without a client to stream to); ``deadline`` as for
        :meth:`admit`."""
        admission = await self.admit(
            ctx,
            body_digest=body_digest,
            new_messages=new_messages,
            executor=executor,
            claim_thread=claim_thread,
            deadline=deadline,
        )
        await self.wait_settled(ctx.identity.tenant_id, ctx.run_id)
        run = await self._runs.get_run(ctx.identity.tenant_id, ctx.run_id)
        return run or admission.run

    async def wait_settled(self, tenant_id: str, run_id: str) -> None:
        """Wait until this process's run has settled, shielded from the caller's own cancellation."""
        await self.background.wait_settled(tenant_id, run_id)

    async def wait_idle(self) -> None:
        """Wait for every background run of this process (tests and graceful shutdown)."""
        await self.background.wait_idle()

    def invocation_deadline(self, deadline: float | None = None) -> float:
        """An invocation's deadline (epoch seconds): ``deadline`` (the Lambda context's), else the function timeout
        from now."""
        return deadline or time.time() + self._function_timeout_s

    async def get_visible_run(self, identity: Identity, run_id: str, *, include_hidden: bool = False) -> Run:
        """The caller's run; NotFound for someone else's, and for hidden runs unless ``include_hidden``."""
        run = await self._runs.get_run(identity.tenant_id, run_id)
        if run is None or not is_visible(run, identity, include_hidden=include_hidden):
            raise NotFound("run not found")
        return run

    async def cancel(self, identity: Identity, run_id: str, *, reason: str | None = None) -> Run:
        """Ask a run to stop, wherever it executes: the ledger records the request (and carries it to the run at its
        next heartbeat when Redis is down); the run's control signal on Redis stops it at once. ``reason``
        (``"interrupted"``, for the ``interrupt`` strategy) rides on the signal: the run's salvage marks its partial
        answer with it (a cancel carried by the ledger alone has none, and is marked ``cancelled``)."""
        run = await self.get_visible_run(identity, run_id)
        if run.status.is_terminal:
            return run
        await self._runs.request_cancel(identity.tenant_id, run_id)
        await self._signal_cancel(identity.tenant_id, run_id, reason)
        self.background.cancel_local(identity.tenant_id, run_id, reason)
        return run.model_copy(update={"cancel_requested": True})

    async def _signal_cancel(self, tenant_id: str, run_id: str, reason: str | None) -> None:
        key = run_control_key(tenant_id, run_id)
        signal = {"type": CANCEL_SIGNAL} if reason is None else {"type": CANCEL_SIGNAL, "reason": reason}
        try:
            await self._stream.append(key, signal)
            await self._stream.expire(key, RUN_STREAM_TTL_S)
        except Exception:
            logger.warning("could not signal a cancel; the ledger carries it", extra={"run_id": run_id}, exc_info=True)

    def tail(
        self, key: str, *, after: str = "0-0", until_terminal: bool = True, deadline: float | None = None
    ) -> AsyncIterator[StreamEntry | None]:
        """A stream's entries for a response (``shared.runs.tailing.StreamTail.tail``)."""
        return self._tail.tail(key, after=after, until_terminal=until_terminal, deadline=deadline)

    async def oldest_retained(self, key: str) -> str | None:
        """The oldest entry the stream ``key`` still holds (None: nothing, the key expired or was never written).
        A stream that cannot say, or cannot be reached, answers ``"0-0"`` (everything held): the tail then reads
        it, and deals with an outage as it always does."""
        if not isinstance(self._stream, RetainedStream):
            return "0-0"
        try:
            return await self._stream.oldest_id(key)
        except Exception:
            logger.warning("could not read where a stream begins", extra={"key": key}, exc_info=True)
            return "0-0"

    def tail_run(
        self, tenant_id: str, run_id: str, *, after: str = "0-0", deadline: float | None = None
    ) -> AsyncIterator[StreamEntry | None]:
        """A run's events until exactly one terminal event (``shared.runs.tailing.StreamTail.tail_run``)."""
        return self._tail.tail_run(tenant_id, run_id, after=after, deadline=deadline)
