"""Run admission, background execution, and the order in which a run ends.

The executor never writes to a socket: it appends events to the run's stream and the stored thread, and every
HTTP response (the POST that started the run, a retry of it, a resume) tails that stream. A client that goes away
therefore never stops a run.

On Lambda an execution environment is frozen as soon as the invocation's response ends, so nothing may be left to
do once a reader has seen the terminal event. A run therefore settles in this order (``_settle``): its events are
flushed, the ledger records the outcome, the thread is released, the stream's retention is set, the run's metrics
and the run-completed publish go out, and only then is the terminal event (RUN_FINISHED or RUN_ERROR) appended.
The POST that started a run waits for it to settle even when its client has gone (``wait_settled``).

A thread's claim is a lease renewed by the run's heartbeat (``shared.runs.watch``). A new run on a thread whose
holder's lease expired (its process froze or died) takes the thread over, ends the old run as the sweeper would,
and goes on. A cancel reaches the run from any process through a Redis signal the run blocks on; when Redis is
down, through the ledger at the next heartbeat.

Faults (docs/reliability.md): admission refuses with ``503 service_unavailable`` when the event stream or the
store cannot take a run, before the run exists, so a retry of the same request starts it cleanly. Once admitted,
the store (DynamoDB) is the record and the stream (Redis) only delivers: a stream outage delays events (the
emitter buffers them in order), a reader that cannot reach the stream for ``stream_outage_grace_s`` gets a
terminal ``RUN_ERROR`` ``stream_unavailable``, and a reader of a run that ended without a terminal event on its
stream gets one rebuilt from the run ledger.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol, runtime_checkable

from ag_ui.core import BaseEvent, RunErrorEvent, RunFinishedEvent, StepFinishedEvent

from shared.errors import AgentError, Conflict, ModelError, NotFound, ServiceUnavailable
from shared.executors.context import RunContext
from shared.models import (
    Identity,
    Message,
    Role,
    Run,
    RunStatus,
    ThreadClaim,
    ThreadTakeover,
    Usage,
    merge_usage,
    utc_now,
)
from shared.ports import EventStream, StreamEntry
from shared.run_events.emitter import RunEmitter, is_terminal, run_started
from shared.run_events.tool_results import emit_result, synthetic_error, tool_message
from shared.run_results import ExecutionResult
from shared.runs.deadline import current_deadline
from shared.runs.outcomes import RUN_ERROR_MESSAGES, RUN_STREAM_TTL_S, usage_to_agui
from shared.runs.pending_calls import LOOKBACK as PENDING_LOOKBACK
from shared.runs.sweeper import RunSweeper, SweepReport, SweepStore
from shared.runs.watch import CANCEL_SIGNAL, RunWatch
from shared.stream_keys import run_control_key, run_stream_key, thread_stream_key

logger = logging.getLogger(__name__)

__all__ = [
    "RUN_ERROR_MESSAGES",
    "RUN_STREAM_TTL_S",
    "Admission",
    "Executor",
    "RunService",
    "RunStore",
    "run_error_of",
    "terminal_from_ledger",
    "usage_to_agui",
]

LEASE_S = 30.0
"""How long a thread stays with a run whose heartbeat stopped (its process froze or died)."""
HEARTBEAT_S = 10.0
"""How often a run renews its lease: one DynamoDB write each time."""
STALE_CLAIM_AFTER = timedelta(minutes=15)
"""A backstop for claims the lease check cannot judge: the longest a Lambda function runs."""
SETTLE_GRACE_S = 15.0
"""How long after the ledger records a run's end its terminal event may still be on its way (``_settle``)."""
FUNCTION_TIMEOUT_S = 900.0
"""The deadline of an invocation that did not say (no Lambda context): the longest a Lambda function runs."""
RUN_DEADLINE_MARGIN_S = 20.0
"""A run ends this long before its invocation's deadline: enough to settle (flush, ledger, publish: bounded)."""
TAIL_DEADLINE_MARGIN_S = 5.0
"""A stream response closes this long before its invocation's deadline; the client resumes with Last-Event-ID."""
RUN_DEADLINE = "run_deadline"
AFTER_RUN_TIMEOUT_S = 10.0
"""The most the run-finished hook (metrics, run-completed publish) may hold back the terminal event."""
_REMEMBERED_SETTLED = 1024

HISTORY_REJECTED_MESSAGE = (
    "The model provider rejected this conversation's history; new messages on this thread will fail the same way "
    "until the cause is fixed."
)
LEGACY_ERROR_CODES = {"model_bad_request": "model_rejected_request"}
"""Codes stored by earlier versions, shown under their current name when a terminal event is rebuilt."""
STREAM_UNAVAILABLE = "stream_unavailable"
STREAM_UNAVAILABLE_MESSAGE = (
    "The live event stream is unavailable. The run goes on and is saved: read the thread history, or resume "
    "this run's events later."
)


@runtime_checkable
class ProbedStream(Protocol):
    """An event stream that can say whether it is reachable (Redis ``PING``)."""

    async def ping(self) -> bool: ...


class Executor(Protocol):
    step_name: str

    async def execute(self, ctx: RunContext, emitter: RunEmitter) -> ExecutionResult: ...


class RunStore(SweepStore, Protocol):
    async def claim_thread(self, identity: Identity, thread_id: str, run_id: str, *, stale_before: Any) -> bool: ...

    async def open_and_claim(
        self, identity: Identity, thread_id: str, run_id: str, *, stale_before: Any
    ) -> ThreadClaim | None: ...

    async def admit_messages(
        self, identity: Identity, thread_id: str, messages: Sequence[Message], run: Run, *, last_seq: int
    ) -> tuple[Run, bool]: ...

    async def forget_thread(self, identity: Identity, thread_id: str, run_id: str) -> None: ...

    async def take_over_thread(
        self, identity: Identity, thread_id: str, run_id: str, *, lease_expired_before: Any
    ) -> ThreadTakeover | None: ...

    async def request_cancel(self, tenant_id: str, run_id: str) -> None: ...


def run_error_of(exc: BaseException) -> tuple[str, str]:
    """The documented ``RUN_ERROR`` code and message for a failure."""
    code = exc.code if isinstance(exc, AgentError) else "run_failed"
    if code not in RUN_ERROR_MESSAGES or (code.startswith("model_") and not isinstance(exc, ModelError)):
        code = "run_failed"
    details = exc.details if isinstance(exc, ModelError) and isinstance(exc.details, dict) else {}
    if code == "model_rejected_request" and details.get("rejected") == "history":
        return code, HISTORY_REJECTED_MESSAGE
    return code, RUN_ERROR_MESSAGES[code]


def usage_metadata(usage: Sequence[Usage]) -> dict[str, Any] | None:
    """``{"usageEstimated": true}`` when any count was estimated because the server reported no usage."""
    return {"usageEstimated": True} if any(u.estimated for u in usage) else None


def terminal_from_ledger(run: Run) -> dict[str, Any]:
    """The terminal event of an ended run, rebuilt from its ledger record (for a stream that lacks one).

    ``metadata.rebuiltFromLedger`` tells a client that events before it may be missing from this stream: the
    run's messages are complete in the thread history.
    """
    usage = [u.model_dump(mode="json", by_alias=True, exclude_none=True) for u in usage_to_agui(run.usage)]
    metadata = {"rebuiltFromLedger": True, **(usage_metadata(run.usage) or {})}
    if run.status is RunStatus.FAILED:
        code = LEGACY_ERROR_CODES.get(run.error_code or "", run.error_code)
        code = code if code in RUN_ERROR_MESSAGES else "run_failed"
        return {
            "type": "RUN_ERROR",
            "message": RUN_ERROR_MESSAGES[code],
            "code": code,
            "usage": usage,
            "metadata": metadata,
        }
    outcome = "cancelled" if run.status is RunStatus.CANCELLED else "success"
    return {
        "type": "RUN_FINISHED",
        "threadId": run.thread_id,
        "runId": run.run_id,
        "outcome": {"type": outcome},
        "usage": usage,
        "metadata": metadata,
    }


def synthetic_entry(event: dict[str, Any]) -> StreamEntry:
    """An event that is not on the stream: its id is empty, and it is framed without an ``id:`` line."""
    return StreamEntry(id="", event={**event, "timestamp": int(time.time() * 1000)})


RunFinishedHook = Callable[[RunContext, RunStatus, ExecutionResult], Awaitable[None]]
SettleMessages = Callable[[list[Message], list[Message]], Awaitable[list[Message]]]
"""``settle(fresh, recent)``: ``recent`` is the thread's newest messages, newest first (read during admission)."""

RECENT_LOOKBACK = 16
"""How many of the thread's newest messages admission reads for ``settle`` when the caller sends no tool result
(``PENDING_LOOKBACK`` when it does: the pending calls it answers may be further back)."""


async def _nothing() -> list[Message]:
    return []


def recent_is_stale(recent: Sequence[Message], last_seq: int) -> bool:
    """Whether the newest messages read beside the claim miss some: the counter the claim saw is further on."""
    newest = recent[0].seq if recent else 0
    return (newest or 0) < last_seq


@dataclass
class _Outcome:
    """How a run ended: what the ledger records, and the terminal event that goes on the stream last."""

    status: RunStatus = RunStatus.FAILED
    result: ExecutionResult | None = None
    error_code: str | None = None
    terminal: BaseEvent | None = None


@dataclass(frozen=True)
class Admission:
    run: Run
    created: bool
    stream_key: str


class RunService:
    def __init__(
        self,
        store: RunStore,
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
    ) -> None:
        if heartbeat_s >= lease_s:
            raise ValueError("the heartbeat must renew the lease before it expires (heartbeat_s < lease_s)")
        self._store = store
        self._stream = stream
        self._ping_interval_s = ping_interval_s
        self._heartbeat_s = heartbeat_s
        self._lease = timedelta(seconds=lease_s)
        self._stream_outage_grace_s = stream_outage_grace_s
        self._flush_timeout_s = flush_timeout_s
        self._settle_grace = timedelta(seconds=settle_grace_s)
        self._after_run_timeout_s = after_run_timeout_s
        self._function_timeout_s = function_timeout_s
        self._run_deadline_margin_s = run_deadline_margin_s
        self._tail_deadline_margin_s = tail_deadline_margin_s
        self._past_deadline: set[tuple[str, str]] = set()
        self._cancel_sent: weakref.WeakSet[asyncio.Task[ExecutionResult]] = weakref.WeakSet()
        self.on_run_finished = on_run_finished
        self._sweeper = RunSweeper(store, stream)
        self._tasks: set[asyncio.Task[None]] = set()
        self._by_run: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._inner: dict[tuple[str, str], asyncio.Task[ExecutionResult]] = {}
        # Runs this process settled lately: a reader of one of them that finds no terminal event on the stream
        # knows it will not come (the stream lost it) and rebuilds it from the ledger without waiting.
        self._settled: OrderedDict[tuple[str, str], None] = OrderedDict()

    async def admit(
        self,
        ctx: RunContext,
        *,
        body_digest: str,
        new_messages: Sequence[Message],
        executor: Executor,
        claim_thread: bool = True,
        settle: SettleMessages | None = None,
    ) -> Admission:
        """Store the run and the caller's new messages, then start the executor in the background.

        The same ``runId`` with the same body attaches to the existing run; with another body it is a conflict.
        ``claim_thread`` makes the run exclusive on its thread (chat and automation runs); memory runs only read
        the thread and never make it busy. ``settle`` sees the new messages once the thread is claimed, and
        returns the ones to store (front-end tool results checked against the pending calls, repairs added); an
        ``AgentError`` it raises refuses the run with nothing stored.
        """
        identity = ctx.identity
        key = run_stream_key(identity.tenant_id, ctx.run_id)
        claim: ThreadClaim | None = None
        try:
            # Round trip 1, all at once: the stream probe, the thread opened and claimed (its counter comes back),
            # which of the caller's messages the thread has, and (for ``settle``) its newest messages.
            lookback = PENDING_LOOKBACK if any(m.role is Role.TOOL for m in new_messages) else RECENT_LOOKBACK
            probed, claimed, known_ids, recent = await asyncio.gather(
                self._probe_stream(),
                self._open_and_claim(ctx) if claim_thread else self._open(ctx),
                self._store.known_message_ids(identity.tenant_id, ctx.thread_id, [m.id for m in new_messages]),
                self._recent(ctx, lookback) if settle is not None else _nothing(),
                return_exceptions=True,
            )
            if isinstance(claimed, ThreadClaim):
                claim = claimed
            for outcome in (probed, claimed, known_ids, recent):
                if isinstance(outcome, BaseException):
                    raise outcome
            assert isinstance(claimed, ThreadClaim) and isinstance(known_ids, set) and isinstance(recent, list)
            fresh = [m for m in new_messages if m.id not in known_ids]
            if settle is not None:
                if recent_is_stale(recent, claimed.last_seq):
                    # The thread moved between the read and the claim (a run ended just then): read it again.
                    recent = await self._recent(ctx, lookback)
                fresh = await settle(fresh, recent)
            run = Run(
                run_id=ctx.run_id,
                thread_id=ctx.thread_id,
                tenant_id=identity.tenant_id,
                user_id=identity.user_id,
                meta=ctx.meta,
                body_digest=body_digest,
            )
            # Round trip 2: the caller's messages and the run record in one transaction, so a failure leaves
            # neither behind and a retry of the same request is admitted afresh. A run that exists already
            # (a retry, or a conflicting body) stores nothing.
            stored_run, created = await self._store.admit_messages(
                identity, ctx.thread_id, fresh, run, last_seq=claimed.last_seq
            )
            if not created:
                if claim is not None and claim.newly_claimed and claim_thread:
                    await self._release_unless_run_exists(identity, ctx, known_to_exist=True)
                return self._attach(stored_run, identity, ctx.thread_id, body_digest, key)
        except AgentError as exc:
            await self._give_back(identity, ctx, claim, claim_thread)
            existing = await self._existing_for_retry(identity, ctx, exc)
            if existing is not None:
                return self._attach(existing, identity, ctx.thread_id, body_digest, key)
            raise
        except Exception as exc:
            logger.exception("admission failed", extra={"run_id": ctx.run_id, "thread_id": ctx.thread_id})
            await self._give_back(identity, ctx, claim, claim_thread)
            raise ServiceUnavailable(
                "the run could not be stored; retry the same request", code="service_unavailable"
            ) from exc
        emitter = RunEmitter(
            self._stream,
            key,
            thread_key=thread_stream_key(identity.tenant_id, ctx.thread_id),
            run_id=ctx.run_id,
            hidden=ctx.meta.hidden_from_user,
            # The run is new, so anything already under its stream key is stale (a ledger restored from a backup,
            # an expired run record): RUN_STARTED's write drops it first (one pipeline), before any reader of
            # this run tails the stream, so none replays another run's events.
            clear_run_stream=True,
        )
        await emitter.emit(run_started(ctx.thread_id, ctx.run_id, ctx.meta))
        deadline = self.invocation_deadline()
        task = asyncio.create_task(
            self._execute(ctx, executor, key, claim_thread, deadline, emitter), name=f"run:{ctx.run_id}"
        )
        self._tasks.add(task)
        self._by_run[(identity.tenant_id, ctx.run_id)] = task
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(lambda _t: self._by_run.pop((identity.tenant_id, ctx.run_id), None))
        return Admission(run=stored_run, created=True, stream_key=key)

    async def _give_back(
        self, identity: Identity, ctx: RunContext, claim: ThreadClaim | None, claim_thread: bool
    ) -> None:
        """After a refused admission: a thread it created (the claim runs beside the stream probe) is deleted,
        so a refused request stores nothing; a thread it claimed is released."""
        if claim is None or not claim.newly_claimed or not claim_thread:
            return
        if claim.created:
            try:
                await self._store.forget_thread(identity, ctx.thread_id, ctx.run_id)
                return
            except Exception:
                logger.warning("could not delete a thread of a refused admission", extra={"run_id": ctx.run_id})
        await self._release_unless_run_exists(identity, ctx)

    async def _existing_for_retry(self, identity: Identity, ctx: RunContext, exc: AgentError) -> Run | None:
        """A refused claim (busy thread, someone else's thread) of a run that already exists: the caller retried
        a request that was admitted before, and attaches to it (or is told its body conflicts)."""
        if exc.code not in {"thread_busy", "not_found"}:
            return None
        try:
            return await self._store.get_run(identity.tenant_id, ctx.run_id)
        except Exception:
            return None

    async def _open(self, ctx: RunContext) -> ThreadClaim:
        """A run that does not claim its thread (memory runs) only opens it."""
        thread = await self._store.open_thread(ctx.identity, ctx.thread_id)
        return ThreadClaim(last_seq=thread.last_seq, newly_claimed=False)

    async def _recent(self, ctx: RunContext, limit: int) -> list[Message]:
        return await self._store.read_back(ctx.identity.tenant_id, ctx.thread_id, before_seq=None, limit=limit)

    async def _open_and_claim(self, ctx: RunContext) -> ThreadClaim:
        """Open and claim the thread in one request; else take it over from a run whose lease expired; else
        ``thread_busy``."""
        identity = ctx.identity
        claim = await self._store.open_and_claim(
            identity, ctx.thread_id, ctx.run_id, stale_before=utc_now() - STALE_CLAIM_AFTER
        )
        if claim is not None:
            return claim
        await self._claim(ctx)
        # The takeover closed the previous run (its unsaved text, its calls' results): the counter moved.
        thread = await self._store.get_thread(identity, ctx.thread_id)
        return ThreadClaim(last_seq=thread.last_seq, newly_claimed=True)

    async def _claim(self, ctx: RunContext) -> bool:
        """Take the thread over from a run whose lease expired (the claim was refused); else ``thread_busy``."""
        identity = ctx.identity
        cutoff = utc_now() - self._lease
        takeover = await self._store.take_over_thread(identity, ctx.thread_id, ctx.run_id, lease_expired_before=cutoff)
        if takeover is None:
            raise Conflict("another run is active on this thread", code="thread_busy")
        await self._close_taken_over(takeover, cutoff, new_run_id=ctx.run_id)
        return True

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
        try:
            await self._sweeper.end_run(previous, cutoff, SweepReport(), reason="lease_expired")
        except Exception:
            # The context window still repairs dangling calls at read time, and the sweeper ends the run later.
            logger.exception("could not close the run taken over", extra={"run_id": takeover.previous_run_id})

    def invocation_deadline(self) -> float:
        """The current invocation's deadline (epoch seconds): the Lambda context's, else the function timeout."""
        return current_deadline(fallback_s=self._function_timeout_s)

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

    async def _release_unless_run_exists(
        self, identity: Identity, ctx: RunContext, *, known_to_exist: bool = False
    ) -> None:
        """Give the thread back after a failed admission, unless a concurrent admission of the same run won (it
        runs and holds the thread). ``known_to_exist``: the run was admitted before; the claim goes when that run
        ended already or lives on another thread (a conflicting body), and stays when it runs here."""
        try:
            if known_to_exist:
                existing = await self._store.get_run(identity.tenant_id, ctx.run_id)
                if existing is not None and (existing.status.is_terminal or existing.thread_id != ctx.thread_id):
                    await self._store.release_thread(identity.tenant_id, ctx.thread_id, ctx.run_id)
                return
            if await self._store.get_run(identity.tenant_id, ctx.run_id) is None:
                await self._store.release_thread(identity.tenant_id, ctx.thread_id, ctx.run_id)
        except Exception:
            # The claim's lease expires by itself and the next run takes the thread over.
            logger.warning("could not release the thread after a failed admission", extra={"run_id": ctx.run_id})

    async def run_inline(
        self,
        ctx: RunContext,
        *,
        body_digest: str,
        new_messages: Sequence[Message],
        executor: Executor,
        claim_thread: bool = True,
    ) -> Run:
        """Admit a run and wait for it to end (Lambda handlers without a client to stream to)."""
        admission = await self.admit(
            ctx, body_digest=body_digest, new_messages=new_messages, executor=executor, claim_thread=claim_thread
        )
        await self.wait_settled(ctx.identity.tenant_id, ctx.run_id)
        run = await self._store.get_run(ctx.identity.tenant_id, ctx.run_id)
        return run or admission.run

    async def wait_settled(self, tenant_id: str, run_id: str) -> None:
        """Wait until this process's run has settled (terminal event on the stream), shielded from the caller's
        own cancellation: the invocation that started a run owns it until then. Returns at once for a run that
        executes elsewhere or has already settled."""
        task = self._by_run.get((tenant_id, run_id))
        if task is not None:
            await asyncio.shield(task)

    def _attach(self, run: Run, identity: Identity, thread_id: str, body_digest: str, key: str) -> Admission:
        if run.user_id != identity.user_id:
            raise NotFound("run not found")
        if run.thread_id != thread_id or run.body_digest != body_digest:
            raise Conflict("runId already used with a different body", code="run_id_conflict")
        return Admission(run=run, created=False, stream_key=key)

    async def get_visible_run(self, identity: Identity, run_id: str, *, include_hidden: bool = False) -> Run:
        """The caller's run; NotFound for someone else's, and for hidden runs unless ``include_hidden``."""
        run = await self._store.get_run(identity.tenant_id, run_id)
        if run is None or run.user_id != identity.user_id:
            raise NotFound("run not found")
        if run.meta.hidden_from_user and not include_hidden:
            raise NotFound("run not found")
        return run

    async def cancel(self, identity: Identity, run_id: str) -> Run:
        """Ask a run to stop, wherever it executes: the ledger records the request (and carries it to the run at its
        next heartbeat when Redis is down); the run's control signal on Redis stops it at once."""
        run = await self.get_visible_run(identity, run_id)
        if run.status.is_terminal:
            return run
        await self._store.request_cancel(identity.tenant_id, run_id)
        await self._signal_cancel(identity.tenant_id, run_id)
        self._cancel_local(identity.tenant_id, run_id)
        return run.model_copy(update={"cancel_requested": True})

    async def _signal_cancel(self, tenant_id: str, run_id: str) -> None:
        key = run_control_key(tenant_id, run_id)
        try:
            await self._stream.append(key, {"type": CANCEL_SIGNAL})
            await self._stream.expire(key, RUN_STREAM_TTL_S)
        except Exception:
            logger.warning("could not signal a cancel; the ledger carries it", extra={"run_id": run_id}, exc_info=True)

    def _cancel_local(self, tenant_id: str, run_id: str) -> None:
        inner = self._inner.get((tenant_id, run_id))
        # Once only: a second cancel would interrupt the executor's own wind-down (its salvage of the turn). Our
        # own record, not ``Task.cancelling()``, which libraries' cancel scopes inside the executor also move.
        if inner is not None and not inner.done() and inner not in self._cancel_sent:
            self._cancel_sent.add(inner)
            inner.cancel()

    def _deadline_reached(self, tenant_id: str, run_id: str) -> None:
        logger.warning("run reached its deadline; ending it", extra={"run_id": run_id})
        self._past_deadline.add((tenant_id, run_id))
        self._cancel_local(tenant_id, run_id)

    async def _execute(
        self,
        ctx: RunContext,
        executor: Executor,
        key: str,
        claim_thread: bool,
        deadline: float,
        emitter: RunEmitter,
    ) -> None:
        tenant = ctx.identity.tenant_id
        started = time.monotonic()
        watch = RunWatch(
            tenant_id=tenant,
            run_id=ctx.run_id,
            beat=lambda: self._store.heartbeat(tenant, ctx.run_id, last_stream_id=emitter.last_id),
            stream=self._stream,
            heartbeat_s=self._heartbeat_s,
            on_cancel=lambda: self._cancel_local(tenant, ctx.run_id),
        )
        watch.start()
        # The run ends itself before its invocation's deadline, so the platform never kills it mid-way.
        stop_in = max(0.0, deadline - self._run_deadline_margin_s - time.time())
        timer = asyncio.get_running_loop().call_later(stop_in, self._deadline_reached, tenant, ctx.run_id)
        # What settles the run if it is itself cancelled (process shutdown): failed, with a RUN_ERROR.
        outcome = _Outcome(terminal=RunErrorEvent(message=RUN_ERROR_MESSAGES["run_failed"], code="run_failed"))
        try:
            inner = asyncio.create_task(executor.execute(ctx, emitter))
            self._inner[(tenant, ctx.run_id)] = inner
            try:
                result = await self._executed(inner)
            finally:
                self._inner.pop((tenant, ctx.run_id), None)
            if (tenant, ctx.run_id) in self._past_deadline:
                outcome = await self._out_of_time(ctx, emitter, result)
            else:
                outcome = self._finished(ctx, result)
        except Exception as exc:
            outcome = await self._failed(ctx, emitter, exc)
        finally:
            timer.cancel()
            self._past_deadline.discard((tenant, ctx.run_id))
            await watch.stop()
            # Logged before the run settles: after its terminal event this environment may be frozen.
            logger.info(
                "run finished",
                extra={
                    "run_id": ctx.run_id,
                    "thread_id": ctx.thread_id,
                    "tenant_id": tenant,
                    "profile": ctx.profile.name,
                    "executor": ctx.meta.executor.value,
                    "status": "taken_over" if watch.state.lost else outcome.status.value,
                    "duration_ms": round((time.monotonic() - started) * 1000),
                    "stream_failures": emitter.stream_failures,
                    "heartbeats": watch.state.beats,
                },
            )
            if watch.state.lost:
                # The takeover ended this run and closed its stream; nothing of this process may follow.
                emitter.discard()
            else:
                await self._settle(ctx, emitter, key, claim_thread, outcome)
            self._remember_settled(tenant, ctx.run_id)

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

    def _finished(self, ctx: RunContext, result: ExecutionResult) -> _Outcome:
        outcome: dict[str, Any] = {"type": "cancelled" if result.cancelled else "success"}
        if result.pending_tool_call_ids and not result.cancelled:
            # Front-end tool calls handed to the client (AG-UI's success outcome names them).
            outcome["pendingToolCallIds"] = list(result.pending_tool_call_ids)
        return _Outcome(
            status=RunStatus.CANCELLED if result.cancelled else RunStatus.SUCCEEDED,
            result=result,
            terminal=RunFinishedEvent(
                thread_id=ctx.thread_id,
                run_id=ctx.run_id,
                outcome=outcome,
                usage=usage_to_agui(result.usage),
                metadata=usage_metadata(result.usage),
            ),
        )

    async def _out_of_time(self, ctx: RunContext, emitter: RunEmitter, result: ExecutionResult) -> _Outcome:
        """The run was stopped at its deadline (the executor wound down as on a cancel): RUN_ERROR run_deadline."""
        await self._close_open(ctx, emitter)
        return _Outcome(
            status=RunStatus.FAILED,
            result=result,
            error_code=RUN_DEADLINE,
            terminal=RunErrorEvent(
                message=RUN_ERROR_MESSAGES[RUN_DEADLINE],
                code=RUN_DEADLINE,
                usage=usage_to_agui(result.usage),
                metadata=usage_metadata(result.usage),
            ),
        )

    async def _close_open(self, ctx: RunContext, emitter: RunEmitter) -> None:
        """Close what the run left open on its stream (tool calls, the step) before its RUN_ERROR."""
        try:
            await self._answer_open_calls(ctx, emitter)
            if emitter.open_step is not None:
                # sse-events.md §2 rule 4: the step is closed before the terminal event, failure or not.
                await emitter.emit(StepFinishedEvent(step_name=emitter.open_step))
        except Exception:
            logger.exception("could not close the failed run's open events", extra={"run_id": ctx.run_id})

    async def _failed(self, ctx: RunContext, emitter: RunEmitter, exc: Exception) -> _Outcome:
        """Close what the run left open on its stream; the RUN_ERROR itself comes last (``_settle``)."""
        error_code, message = run_error_of(exc)
        partial_usage = list(getattr(exc, "usage_so_far", None) or [])
        _log_failure(ctx, exc, error_code)
        await self._close_open(ctx, emitter)
        return _Outcome(
            status=RunStatus.FAILED,
            result=ExecutionResult(usage=partial_usage),
            error_code=error_code,
            terminal=RunErrorEvent(
                message=message,
                code=error_code,
                usage=usage_to_agui(partial_usage),
                metadata=usage_metadata(partial_usage),
            ),
        )

    async def _answer_open_calls(self, ctx: RunContext, emitter: RunEmitter) -> None:
        """The last guard of sse-events.md §2 rule 4: every tool call on the stream gets a result.

        The executor's own salvage normally answers its calls; this covers the calls it could not (for example when
        storing the turn that made them failed). A result is stored only when the call is stored, so the thread
        never gains an orphan; otherwise it only closes the call on the wire.
        """
        if not emitter.unanswered_calls:
            return
        tenant = ctx.identity.tenant_id
        parents = sorted(set(emitter.unanswered_calls.values()))
        try:
            stored = await self._store.known_message_ids(tenant, ctx.thread_id, parents)
        except Exception:
            stored = set()
        content = synthetic_error("run_failed", "the run failed before this tool ran")
        for call_id, parent in list(emitter.unanswered_calls.items()):
            message = tool_message(ctx, call_id, content, synthetic=True)
            if parent in stored:
                try:
                    await self._store.append_messages(ctx.identity, ctx.thread_id, [message])
                except Exception:
                    logger.warning("could not store a synthetic tool result", extra={"run_id": ctx.run_id})
            await emit_result(emitter, message)

    async def _settle(
        self, ctx: RunContext, emitter: RunEmitter, key: str, claim_thread: bool, outcome: _Outcome
    ) -> None:
        """Everything a run's end needs, then its terminal event last; each step is tried even if another fails.

        A reader ends its response at the terminal event, and on Lambda the environment freezes then: so the ledger,
        the thread release, the stream's retention, the metrics and the run-completed publish are all done before.
        The ledger records the end only after the stream has every event but the terminal one, so a reader that
        sees an ended run and no terminal event waits for it, then rebuilds it from the ledger (``tail_run``).
        """
        tenant = ctx.identity.tenant_id
        on_stream = await emitter.flush(self._flush_timeout_s) if emitter.pending else True
        try:
            await self._store.finish_run(
                tenant,
                ctx.run_id,
                status=outcome.status.value,
                usage=merge_usage(outcome.result.usage) if outcome.result else [],
                last_stream_id=emitter.last_id,
                error_code=outcome.error_code,
            )
        except Exception:
            # The run stays "running" with a heartbeat that stops: a takeover or the sweeper ends it.
            logger.exception("could not record the end of the run", extra={"run_id": ctx.run_id})
        if claim_thread:
            try:
                await self._store.release_thread(tenant, ctx.thread_id, ctx.run_id)
            except Exception:
                logger.exception("could not release the thread", extra={"run_id": ctx.run_id})
        try:
            await self._stream.expire(key, RUN_STREAM_TTL_S)
        except Exception:
            logger.warning("could not set the stream's retention", extra={"run_id": ctx.run_id})
        await self._after_run(ctx, outcome)
        if outcome.terminal is None:  # pragma: no cover - every outcome has one
            return
        try:
            await emitter.emit(outcome.terminal)
            # A stream that already failed the last flush gets one more try, not another full wait.
            await emitter.flush(self._flush_timeout_s if on_stream else 0.0)
        except Exception:
            logger.exception("could not write the terminal event", extra={"run_id": ctx.run_id})

    async def _after_run(self, ctx: RunContext, outcome: _Outcome) -> None:
        """The run-finished hook (metrics, the run-completed publish), bounded so the terminal event always goes out."""
        if self.on_run_finished is None or outcome.result is None:
            return
        try:
            await asyncio.wait_for(
                self.on_run_finished(ctx, outcome.status, outcome.result), timeout=self._after_run_timeout_s
            )
        except TimeoutError:
            logger.error("run-finished hook timed out", extra={"run_id": ctx.run_id})
        except Exception:
            logger.exception("run-finished hook failed", extra={"run_id": ctx.run_id})

    def _remember_settled(self, tenant_id: str, run_id: str) -> None:
        self._settled[(tenant_id, run_id)] = None
        while len(self._settled) > _REMEMBERED_SETTLED:
            self._settled.popitem(last=False)

    def _tail_ends_at(self, deadline: float | None) -> float:
        """When a stream response closes (epoch seconds): before its invocation's deadline, with a margin."""
        return (deadline or self.invocation_deadline()) - self._tail_deadline_margin_s

    def _block_ms(self, ends_at: float) -> int | None:
        """How long the next blocking read may wait: the ping interval, cut at the end; None once it has passed."""
        left = ends_at - time.time()
        if left <= 0:
            return None
        return max(1, int(min(self._ping_interval_s, left) * 1000))

    async def tail(
        self, key: str, *, after: str = "0-0", until_terminal: bool = True, deadline: float | None = None
    ) -> AsyncIterator[StreamEntry | None]:
        """Entries after ``after``; ``None`` marks a silent stretch (send a ping). A run's tail ends after the
        terminal event; a thread's tail (``until_terminal=False``) goes on until the client leaves, until the
        stream has been unreachable for the outage grace period, or until shortly before the invocation's
        ``deadline``; the client then resumes with its last id."""
        cursor = after
        ends_at = self._tail_ends_at(deadline)
        while True:
            block_ms = self._block_ms(ends_at)
            if block_ms is None:
                return
            entries = await self._read_through_outage(key, cursor, block_ms)
            if entries is None:
                return
            if not entries:
                yield None
                continue
            for entry in entries:
                cursor = entry.id
                yield entry
                if until_terminal and is_terminal(entry.event):
                    return

    async def tail_run(
        self, tenant_id: str, run_id: str, *, after: str = "0-0", deadline: float | None = None
    ) -> AsyncIterator[StreamEntry | None]:
        """A run's events after ``after`` until its terminal event; ``None`` marks a silent stretch.

        Always ends with exactly one terminal event: the stream's own; or, when the ledger says the run ended and
        the stream has none (lost in an outage, or the process died), one rebuilt from the ledger; or, when the
        stream stays unreachable, ``RUN_ERROR`` ``stream_unavailable`` (the run itself goes on). Rebuilt events
        carry an empty id: they are not on the stream and cannot be resumed from. Shortly before the invocation's
        ``deadline`` (a run that executes elsewhere and outlasts this response) it ends without a terminal event,
        and the client resumes with its last id.
        """
        key = run_stream_key(tenant_id, run_id)
        cursor = after
        ends_at = self._tail_ends_at(deadline)
        while True:
            block_ms = self._block_ms(ends_at)
            if block_ms is None:
                return
            entries = await self._read_through_outage(key, cursor, block_ms)
            if entries is None:
                yield synthetic_entry(
                    {"type": "RUN_ERROR", "message": STREAM_UNAVAILABLE_MESSAGE, "code": STREAM_UNAVAILABLE}
                )
                return
            if not entries:
                ended = await self._ended_run(tenant_id, run_id)
                if ended is not None and not self._terminal_may_come(tenant_id, ended):
                    # The run settled and its terminal event never reached the stream: one more look, then the
                    # event rebuilt from the ledger.
                    entries = await self._read_through_outage(key, cursor, 0) or []
                    if not entries:
                        yield synthetic_entry(terminal_from_ledger(ended))
                        return
                else:
                    yield None
                    continue
            for entry in entries:
                cursor = entry.id
                yield entry
                if is_terminal(entry.event):
                    return

    def _terminal_may_come(self, tenant_id: str, ended: Run) -> bool:
        """Whether an ended run's terminal event may still be on its way: it goes on the stream after the ledger
        records the end (``_settle``). This process knows its own runs; for another's, the settle grace decides."""
        key = (tenant_id, ended.run_id)
        if key in self._by_run:
            return True
        if key in self._settled:
            return False
        return utc_now() - ended.updated_at < self._settle_grace

    async def _ended_run(self, tenant_id: str, run_id: str) -> Run | None:
        try:
            run = await self._store.get_run(tenant_id, run_id)
        except Exception:
            logger.warning("could not read the run ledger while tailing", extra={"run_id": run_id})
            return None
        return run if run is not None and run.status.is_terminal else None

    async def _read_through_outage(self, key: str, cursor: str, block_ms: int) -> list[StreamEntry] | None:
        """``read_after``, retried while the stream is unreachable; None once the outage outlasts the grace."""
        loop = asyncio.get_running_loop()
        deadline: float | None = None
        while True:
            try:
                return await self._stream.read_after(key, cursor, block_ms=block_ms)
            except Exception:
                now = loop.time()
                if deadline is None:
                    logger.warning("event stream unreachable while tailing", extra={"key": key})
                    deadline = now + self._stream_outage_grace_s
                if now >= deadline:
                    return None
                await asyncio.sleep(min(0.25, deadline - now))

    async def wait_idle(self) -> None:
        """Wait for every background run of this process (tests and graceful shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    @property
    def active_runs(self) -> int:
        return len(self._tasks)


def _log_failure(ctx: RunContext, exc: BaseException, code: str) -> None:
    """One log line per failed run. A model failure is not a bug of ours: a transient one (the provider was busy, a
    single-slot server cut the stream for another request) is a one-line warning, since the work is retried (a new
    run, a redelivered memory event); a rejected request is an error with the provider's explanation; only an
    unexpected failure carries a traceback."""
    extra: dict[str, Any] = {"run_id": ctx.run_id, "thread_id": ctx.thread_id, "code": code, "cause": _cause(exc)}
    if isinstance(exc, ModelError):
        details = exc.details if isinstance(exc.details, dict) else {}
        extra.update({k: details[k] for k in ("provider", "model", "provider_model", "status") if k in details})
        if exc.transient:
            logger.warning("run failed (transient, retryable): %s", exc.code, extra={**extra, "retryable": True})
        else:
            logger.error("run failed: %s", _cause(exc), extra={**extra, "retryable": False})
        return
    logger.exception("run failed", extra=extra)


def _cause(exc: BaseException) -> str:
    """What went wrong, for the log only (a provider's message may carry internals the client must not see)."""
    return f"{type(exc).__name__}: {exc}"[:500]
