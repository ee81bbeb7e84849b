"""Admission: a run is stored with the caller's new messages and its thread claimed, or refused with nothing stored.

Two round trips. The first, all at once: the event stream is probed, the thread opened and claimed (its message
counter comes back), and (``read_recent``) the thread's newest messages read, which tell which of the caller's
messages the thread has (``shared.runs.known_ids``); without that read, the caller's message ids are checked against
the thread instead. Between the two, the caller may reconcile the new messages with what was read, as a pure step
(``Claim.with_messages``; ``shared.runs.reconciling``). The second stores the caller's messages and the run record
in one transaction, so a failure leaves neither behind and a retry of the same request is admitted afresh.

A thread's claim is a lease renewed by the run's heartbeat. A new run on a thread whose holder's lease expired (its
process froze or died) takes the thread over, ends the old run as the sweeper would, and goes on.

Faults (docs/reliability.md): admission refuses with ``503 service_unavailable`` when the event stream or the store
cannot take a run, before the run exists, so a retry of the same request starts it cleanly. The same ``runId`` with
the same body attaches to the existing run; with another body it is a conflict.

Admission only stores: starting the run is ``shared.runs.execution``'s, and the facade (``shared.runs.service``)
joins the two.

Limits (``shared.limits``): with a ``LimitGate``, the run's reservation (tokens, and for a chat run a concurrency
slot and a run of the minute) is sent in the first round trip, beside the claim. Refused (``429``), the claim is
given back as for any refusal, so nothing is stored; taken, it is held for settlement once the run is stored, and
given back when the admission fails later or attaches to a run admitted before.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any

from shared.context_window import KnownHistory
from shared.errors import AgentError, Conflict, ServiceUnavailable
from shared.executors.context import RunContext
from shared.limits.gate import LimitGate, estimate_tokens
from shared.models import ExecutorKind, Message, Origin, Run, ThreadClaim, ThreadTakeover, utc_now
from shared.ports import AuditLog, EventStream, ProbedStream, RunLedger, ThreadStore
from shared.runs.branching import branch_audit, check_referenced, referenced_ids, retried_run, running_run
from shared.runs.claims import RECENT_LOOKBACK, Admission, Attempt, Claim, check_retry
from shared.runs.known_ids import no_messages, place_messages, recent_is_stale
from shared.runs.run_estimate import first_request_estimate, refused_for_tokens
from shared.runs.slots import StaleSlots
from shared.tracing.api import span

logger = logging.getLogger(__name__)

LEASE_S = 30.0
"""How long a thread stays with a run whose heartbeat stopped (its process froze or died)."""
STALE_CLAIM_AFTER = timedelta(minutes=15)
"""A backstop for claims the lease check cannot judge: the longest a Lambda function runs."""
class Admitter:
    """Stores a run, or refuses it with nothing stored (the module docstring says how)."""

    def __init__(
        self,
        threads: ThreadStore,
        runs: RunLedger,
        audit: AuditLog,
        stream: EventStream,
        *,
        lease: timedelta,
        limits: LimitGate | None = None,
    ) -> None:
        """``audit``: only for the sweeper's repair of a run taken over (or of a stale slot's)."""
        self._threads = threads
        self._runs = runs
        self._audit = audit
        self._stream = stream
        self._lease = lease
        self._limits = limits
        self._stale_slots = (
            StaleSlots(limits, threads, runs, audit, stream, lease=lease) if limits is not None else None
        )

    async def admit(
        self,
        ctx: RunContext,
        *,
        body_digest: str,
        new_messages: Sequence[Message],
        claim_thread: bool = True,
    ) -> Admission:
        """Store the run and the caller's new messages, or attach to the run stored before under the same id: the
        two steps below, one after the other."""
        claim = await self.claim(ctx, body_digest=body_digest, new_messages=new_messages, claim_thread=claim_thread)
        return claim if isinstance(claim, Admission) else await self.store(claim)

    async def claim(
        self,
        ctx: RunContext,
        *,
        body_digest: str,
        new_messages: Sequence[Message],
        claim_thread: bool = True,
        read_recent: bool = False,
    ) -> Claim | Admission:
        """Round trip 1: claim the thread and read beside the claim. The ``Claim`` to :meth:`store`, or the run
        stored before under the same id (a retry attaching to it).

        ``claim_thread`` makes the run exclusive on its thread (chat and automation runs); memory runs only read
        the thread and never make it busy. ``read_recent`` reads the thread's newest messages beside the claim
        (``Claim.recent``), for the caller to reconcile the new messages with (``Claim.with_messages``) and for the
        run's first context window."""
        attempt = Attempt(ctx, claim_thread)
        try:
            with span("agent.admission.claim"):
                claimed, fresh, recent = await self._claim_and_read(attempt, new_messages, read_recent)
        except Exception as exc:
            return await self._refused(attempt, body_digest, exc)
        return Claim(attempt, body_digest, claimed, fresh, recent)

    async def store(self, claim: Claim) -> Admission:
        """Round trip 2: the caller's messages and the run record in one write; a run that exists already (a
        retry, or a conflicting body) stores nothing and is attached to (or refused)."""
        try:
            return await self._store_or_attach(claim)
        except Exception as exc:
            return await self._refused(claim.attempt, claim.body_digest, exc)

    async def refuse(self, claim: Claim, exc: Exception) -> Admission:
        """Refuse a claimed run for ``exc`` (its new messages could not be reconciled): what was claimed is given back,
        and ``exc`` raised (or the run stored before under the same id attached to, for a retry)."""
        return await self._refused(claim.attempt, claim.body_digest, exc)

    async def _refused(self, attempt: Attempt, body_digest: str, exc: Exception) -> Admission:
        """A failed step: what it claimed is given back; the run stored before under the same id is attached to,
        else ``exc`` is raised (an unexpected failure as ``503 service_unavailable``)."""
        ctx = attempt.ctx
        if isinstance(exc, AgentError):
            await self._give_back(attempt)
            existing = await self._existing_for_retry(ctx, exc)
            running = await running_run(self._runs, ctx, attempt.retry_of) if existing is None else None
            await self._release_reservation(attempt, existing)
            if running is not None:  # nothing new while the run that took the message runs: follow that run
                return Admission(run=running, created=False)
            if existing is not None:
                return self._attach(existing, ctx, body_digest)
            raise exc
        logger.error("admission failed", extra={"run_id": ctx.run_id, "thread_id": ctx.thread_id}, exc_info=exc)
        await self._give_back(attempt)
        await self._release_reservation(attempt, None)
        raise ServiceUnavailable(
            "the run could not be stored; retry the same request", code="service_unavailable"
        ) from exc

    async def _store_or_attach(self, claim: Claim) -> Admission:
        attempt, ctx, claimed, fresh = claim.attempt, claim.attempt.ctx, claim.claimed, claim.fresh
        run = Run(
            run_id=ctx.run_id,
            thread_id=ctx.thread_id,
            tenant_id=ctx.identity.tenant_id,
            user_id=ctx.identity.user_id,
            meta=ctx.meta,
            body_digest=claim.body_digest,
            after_seq=claimed.last_seq,  # the thread is claimed: every message of this run comes after it
            webhook=ctx.webhook,
        )
        with span("agent.admission.store", {"agent.admission.messages": len(fresh)}):
            stored_run, created, stored = await self._threads.admit_messages(
                ctx.identity,
                ctx.thread_id,
                fresh,
                run,
                last_seq=claimed.last_seq,
                last_leaf=claimed.leaf_id,
                leaf_after=ctx.leaf_id,
                user_digest=attempt.user_digest,
            )
        if created:
            if self._limits is not None and attempt.reservation is not None:
                self._limits.hold(attempt.reservation)
            for record in branch_audit(ctx.identity, ctx.thread_id, ctx.run_id, stored, ctx.leaf_id):
                await self._audit.record(record)
            history = None
            if claim.recent is not None:
                history = KnownHistory.after_admission(
                    claim.recent, read_limit=RECENT_LOOKBACK, last_seq=claimed.last_seq, stored=stored
                )
            return Admission(run=stored_run, created=True, history=history)
        if attempt.holds_new_claim:
            await self._release_unless_run_exists(ctx, known_to_exist=True)
        await self._release_reservation(attempt, stored_run)
        return self._attach(stored_run, ctx, claim.body_digest)

    async def _claim_and_read(
        self, attempt: Attempt, new_messages: Sequence[Message], read_recent: bool
    ) -> tuple[ThreadClaim, list[Message], list[Message] | None]:
        """Round trip 1: the claim (recorded on ``attempt`` even when another part fails), the new messages, and
        (``read_recent``) the thread's newest messages up to the claim's counter, newest first."""
        ctx = attempt.ctx
        # With the newest page read, the page and the client's order tell which messages are new (known_ids); without
        # it, every id is checked beside the claim; an edit's parent and a regenerate's question are in any case.
        references = referenced_ids(new_messages, ctx.leaf_id)
        ids = references if read_recent else [m.id for m in new_messages] + references
        claimed, probed, known_ids, recent, reserved = await asyncio.gather(
            self._open_and_claim(ctx) if attempt.claim_thread else self._open(ctx),
            self._probe_stream(),
            self._known(ctx, ids),
            self._recent(ctx) if read_recent else no_messages(),
            self._reserve(attempt),
            return_exceptions=True,
        )
        if isinstance(claimed, ThreadClaim):
            attempt.claim = claimed
        elif isinstance(recent, list):  # a busy thread: perhaps a retry of its run (its messages all in the page)
            attempt.retry_of = retried_run(ctx, new_messages, {m.id for m in recent}, recent)
        refine = read_recent and refused_for_tokens(reserved)  # too small for the worst case: asked again below
        for outcome in (probed, claimed, known_ids, recent, None if refine else reserved):
            if isinstance(outcome, BaseException):
                raise outcome
        assert isinstance(claimed, ThreadClaim) and isinstance(known_ids, set) and isinstance(recent, list)
        check_referenced(new_messages, ctx.leaf_id, known_ids)  # an edit's parent, a regenerate's question
        if not read_recent:
            return claimed, [m for m in new_messages if m.id not in known_ids], None
        if recent_is_stale(recent, claimed.last_seq):
            # The thread moved between the read and the claim (a run ended just then): read it again.
            recent = await self._recent(ctx)
        fresh, attempt.older, attempt.user_digest = await place_messages(
            new_messages, recent, claimed.user_digest, read_limit=RECENT_LOOKBACK, read=self._stored(ctx)
        )
        if refine:
            estimate = await first_request_estimate(ctx, claimed, recent, fresh, read_limit=RECENT_LOOKBACK)
            await self._reserve(attempt, estimate=estimate)
        return claimed, fresh, recent

    def _stored(self, ctx: RunContext) -> Callable[[Sequence[str]], Awaitable[list[Message]]]:
        return functools.partial(self._threads.stored_messages, ctx.identity.tenant_id, ctx.thread_id)

    async def _known(self, ctx: RunContext, ids: Sequence[str]) -> set[str]:
        """The ids of ``ids`` the thread holds; no request for none."""
        if not ids:
            return set()
        return await self._threads.known_message_ids(ctx.identity.tenant_id, ctx.thread_id, ids)

    async def _reserve(self, attempt: Attempt, *, estimate: int | None = None) -> None:
        """The run's reservation (``shared.limits``) of ``estimate`` tokens (None: the worst case), on ``attempt``;
        refused for want of a slot, the slots of runs no longer running are freed (``runs.slots``), asked again."""
        if self._limits is None or self._stale_slots is None:
            return
        ctx = attempt.ctx
        interactive = ctx.meta.origin is Origin.CHAT and ctx.meta.executor is ExecutorKind.WORKER
        estimate = estimate_tokens(ctx.profile) if estimate is None else estimate
        try:
            attempt.reservation = await self._limits.reserve(
                ctx.identity, ctx.run_id, interactive=interactive, estimate=estimate
            )
        except AgentError as exc:
            if exc.code != "too_many_runs" or not await self._stale_slots.free(ctx.identity):
                raise
            attempt.reservation = await self._limits.reserve(
                ctx.identity, ctx.run_id, interactive=interactive, estimate=estimate
            )

    async def _release_reservation(self, attempt: Attempt, existing: Run | None) -> None:
        """Give back the reservation of a run that will not run from this admission; a retry that attaches to its
        running run leaves the slot they share with that run."""
        if self._limits is None or attempt.reservation is None:
            return
        mine = existing is not None and existing.user_id == attempt.ctx.identity.user_id
        keep_slot = mine and existing is not None and not existing.status.is_terminal
        reservation, attempt.reservation = attempt.reservation, None
        await self._limits.release(reservation, keep_slot=keep_slot)

    async def _give_back(self, attempt: Attempt) -> None:
        """After a refused admission: a thread it created (the claim runs beside the stream probe) is deleted,
        so a refused request stores nothing; a thread it claimed is released."""
        if not attempt.holds_new_claim:
            return
        ctx = attempt.ctx
        if attempt.claim is not None and attempt.claim.created:
            try:
                await self._threads.forget_thread(ctx.identity, ctx.thread_id, ctx.run_id)
                return
            except Exception:
                logger.warning("could not delete a thread of a refused admission", extra={"run_id": ctx.run_id})
        await self._release_unless_run_exists(ctx)

    async def _existing_for_retry(self, ctx: RunContext, exc: AgentError) -> Run | None:
        """A refused claim (busy thread, someone else's thread) of a run that already exists: the caller retried
        a request that was admitted before, and attaches to it (or is told its body conflicts)."""
        if exc.code not in {"thread_busy", "not_found", "run_exists"}:
            return None
        try:
            return await self._runs.get_run(ctx.identity.tenant_id, ctx.run_id)
        except Exception:
            return None

    @staticmethod
    def _attach(run: Run, ctx: RunContext, body_digest: str) -> Admission:
        check_retry(run, ctx.identity.user_id, ctx.thread_id, body_digest)
        return Admission(run=run, created=False)

    async def _open(self, ctx: RunContext) -> ThreadClaim:
        """A run that does not claim its thread (memory runs) only opens it."""
        thread = await self._threads.open_thread(ctx.identity, ctx.thread_id)
        return ThreadClaim(last_seq=thread.last_seq, newly_claimed=False, leaf_id=thread.leaf_id)

    async def _recent(self, ctx: RunContext) -> list[Message]:
        return await self._threads.read_back(
            ctx.identity.tenant_id, ctx.thread_id, before_seq=None, limit=RECENT_LOOKBACK
        )

    async def _open_and_claim(self, ctx: RunContext) -> ThreadClaim:
        """Open and claim the thread in one request; else take it over from a run whose lease expired; else
        ``thread_busy``."""
        identity = ctx.identity
        claim = await self._threads.open_and_claim(
            identity, ctx.thread_id, ctx.run_id, stale_before=utc_now() - STALE_CLAIM_AFTER
        )
        if claim is not None:
            return claim
        await self._take_over(ctx)
        # The takeover closed the previous run (its unsaved text, its calls' results): the counter moved.
        thread = await self._threads.get_thread(identity, ctx.thread_id)
        return ThreadClaim(last_seq=thread.last_seq, newly_claimed=True, leaf_id=thread.leaf_id)

    async def _take_over(self, ctx: RunContext) -> None:
        """Take the thread over from a run whose lease expired (the claim was refused); else ``thread_busy``."""
        cutoff = utc_now() - self._lease
        takeover = await self._threads.take_over_thread(
            ctx.identity, ctx.thread_id, ctx.run_id, lease_expired_before=cutoff
        )
        if takeover is None:
            raise Conflict("another run is active on this thread", code="thread_busy")
        await self._close_taken_over(takeover, cutoff, new_run_id=ctx.run_id)

    async def _close_taken_over(self, takeover: ThreadTakeover, cutoff: Any, *, new_run_id: str) -> None:
        """End the run whose lease expired as the sweeper would: ledger ``failed``, unsaved text stored, dangling
        tool calls answered, its stream closed with RUN_ERROR; all before this run reads the thread."""
        previous = takeover.previous
        logger.warning(
            "thread taken over from a run whose lease expired",
            extra={"run_id": new_run_id, "previous_run_id": takeover.previous_run_id},
        )
        if previous is None or previous.status.is_terminal:
            return
        # Imported here, not with this module: only a takeover needs the sweeper's repair, so a function's start-up
        # (Lambda INIT) does not load it; a takeover is rare (a run whose process stopped) and pays it once.
        from shared.runs.sweeper import RunSweeper, SweepReport

        try:
            sweeper = RunSweeper(
                self._threads,
                self._runs,
                self._audit,
                self._stream,
                on_run_ended=self._limits.ended if self._limits else None,
            )
            await sweeper.end_run(previous, cutoff, SweepReport(), reason="lease_expired", ended_by="takeover")
        except Exception:
            # The context window still repairs dangling calls at read time, and the sweeper ends the run later.
            logger.exception("could not close the run taken over", extra={"run_id": takeover.previous_run_id})

    async def _probe_stream(self) -> None:
        """Refuse before anything is stored when the event stream is down: nobody could follow the run."""
        if not isinstance(self._stream, ProbedStream):
            return
        try:
            reachable = await self._stream.ping()
        except Exception:
            logger.warning("event stream unreachable at admission", exc_info=True)
            reachable = False
        if not reachable:
            raise ServiceUnavailable("the event stream is unavailable; retry shortly", code="service_unavailable")

    async def _release_unless_run_exists(self, ctx: RunContext, *, known_to_exist: bool = False) -> None:
        """Give the thread back after a failed admission, unless a concurrent admission of the same run won (it
        runs and holds the thread). ``known_to_exist``: the run was admitted before; the claim goes when that run
        ended already or lives on another thread (a conflicting body), and stays when it runs here."""
        tenant = ctx.identity.tenant_id
        try:
            if known_to_exist:
                existing = await self._runs.get_run(tenant, ctx.run_id)
                if existing is not None and (existing.status.is_terminal or existing.thread_id != ctx.thread_id):
                    await self._threads.release_thread(tenant, ctx.thread_id, ctx.run_id)
                return
            if await self._runs.get_run(tenant, ctx.run_id) is None:
                await self._threads.release_thread(tenant, ctx.thread_id, ctx.run_id)
        except Exception:
            # The claim's lease expires by itself and the next run takes the thread over.
            logger.warning("could not release the thread after a failed admission", extra={"run_id": ctx.run_id})
