"""One memory extraction per thread per quiet period.

A worker run's ``agent.run.completed`` event no longer starts a memory run by itself. :class:`ExtractionCoalescer`

1. notes the event on the thread's pending marker (the ``PendingExtractions`` port): the thread's generation goes up
   by one;
2. counts the human user messages waiting after the extraction cursor. When there are at least
   ``memory_policy.max_pending_user_messages`` (K), it extracts at once;
3. otherwise sends an :class:`ExtractionDue` message for that generation with a delay of ``memory_policy.idle_s``
   (T) (production: SQS ``DelaySeconds`` on the memory queue; ``make dev``: an in-process timer).

A branch switch (``agent.branch.switched``, :meth:`ExtractionCoalescer.on_branch_switched`) is noted the same way
and always waits the quiet period: it starts no run of its own, and the extraction that follows retracts the
memories whose only evidence is on a branch no longer current (``shared.memory.branch_retraction``). Switching back
within the quiet period moves the generation again, so only the branch current at the end counts.

When a due message arrives (:meth:`ExtractionCoalescer.on_due`), it fires only if its generation is still the
thread's current one, i.e. no turn finished in the T seconds since: of a burst of turns, only the last turn's
message extracts, and that one run reads every message since the cursor. A due message for a thread whose marker
was cancelled (thread deletion) or whose user was deleted after the turn is dropped.

Running is guarded by the marker's lease (at most one memory run per thread). When the lease is held, the due
message is sent again for a later try, so the turns that arrived while a run was in flight are not forgotten.
The run reads after the cursor and moves it only when it succeeds, so two runs never read the same new
messages, whatever the order or the number of copies in which events arrive; the memory run's id is derived from
the thread and generation, so two copies of the same due message attach to one run.

Over a token budget (``shared.limits``: the memory run's admission is refused with ``quota_exceeded``), the
extraction is deferred, not dropped: the marker and the cursor stay as they are (the messages stay pending), and
the due message is sent again for when the budget resets (at most ``DEFER_MAX_S`` later, the queue's longest
delay, and again until then). Counted as ``MemoryExtractionsDeferred``.

Nothing here waits: every step is a few store calls and one queue send, done inside the invocation that handles
the event (no background work after a Lambda response).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta

from shared.errors import TooManyRequests
from shared.limits.metrics import MEMORY_EXTRACTIONS_DEFERRED, emit_limit_metric
from shared.memory.job import MEMORY_PROFILE, BranchSwitched, ExtractionReport, MemoryExtraction, RunCompleted
from shared.memory.models import ExtractionDue as ExtractionDue  # the message body this module sends; re-exported
from shared.memory.ports import DueQueue, PendingExtractions
from shared.models import ExecutorKind, Identity, digest, utc_now
from shared.profiles import MemoryPolicy, Profiles

logger = logging.getLogger(__name__)

DEFAULT_LEASE_S = 900
"""How long a memory run holds its thread: above the memory function's timeout, so a crashed run's lease ends."""
BUSY_RETRY_S = 30
"""When a due message finds a run in flight, it is sent again after this long (or T, if shorter)."""
DEFER_MAX_S = 900
"""The longest delay of a due message deferred over a budget (SQS ``DelaySeconds`` allows 15 minutes)."""


class ExtractionCoalescer:
    def __init__(
        self,
        extraction: MemoryExtraction,
        pending: PendingExtractions,
        queue: DueQueue,
        profiles: Profiles,
        *,
        idle_s_override: int | None = None,
        lease_s: int = DEFAULT_LEASE_S,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self._extraction = extraction
        self._pending = pending
        self._queue = queue
        self._profiles = profiles
        self._idle_override = idle_s_override
        self._lease_s = lease_s
        self._clock = clock

    def policy(self, tenant_id: str, user_id: str | None = None) -> MemoryPolicy:
        """When the thread's extraction fires: the memory policy of the profile the user's runs get."""
        policy = self._profiles.resolve(MEMORY_PROFILE, tenant_id=tenant_id, user_id=user_id).memory_policy
        if self._idle_override is not None:
            policy = policy.model_copy(update={"idle_s": self._idle_override})
        return policy

    async def on_run_completed(self, event: RunCompleted, *, deadline: float | None = None) -> ExtractionReport:
        """``deadline``: the invocation's (epoch seconds; None: the function timeout from now), for a run started
        now."""
        if event.executor != ExecutorKind.WORKER.value:
            return ExtractionReport("skipped", "not_a_worker_run")
        identity = Identity(tenant_id=event.tenant_id, user_id=event.user_id)
        if not await self._extraction.owns_thread(identity, event.thread_id):
            return ExtractionReport("skipped", "thread_not_found")
        generation = await self._pending.note(event.tenant_id, event.user_id, event.thread_id, now=self._clock())
        policy = self.policy(event.tenant_id, event.user_id)
        waiting = await self._extraction.pending_user_messages(event.tenant_id, event.thread_id)
        due = ExtractionDue(
            tenant_id=event.tenant_id, user_id=event.user_id, thread_id=event.thread_id, generation=generation
        )
        if waiting >= policy.max_pending_user_messages:
            logger.info(
                "memory extraction: enough user messages pending",
                extra={"thread_id": event.thread_id, "pending": waiting, "generation": generation},
            )
            return await self._run(due, attempt=1, policy=policy, deadline=deadline)
        await self._queue.send(due, delay_s=policy.idle_s)
        return ExtractionReport("scheduled", f"due_in_{policy.idle_s}s", decisions={"pending": waiting})

    async def on_branch_switched(self, event: BranchSwitched) -> ExtractionReport:
        """Note the switch on the thread's marker and send its due message after the quiet period: the branch left
        must stay non-current that long before its memories are retracted (docs/memory.md)."""
        identity = Identity(tenant_id=event.tenant_id, user_id=event.user_id)
        if not await self._extraction.owns_thread(identity, event.thread_id):
            return ExtractionReport("skipped", "thread_not_found")
        generation = await self._pending.note(event.tenant_id, event.user_id, event.thread_id, now=self._clock())
        policy = self.policy(event.tenant_id, event.user_id)
        due = ExtractionDue(
            tenant_id=event.tenant_id, user_id=event.user_id, thread_id=event.thread_id, generation=generation
        )
        await self._queue.send(due, delay_s=policy.idle_s)
        return ExtractionReport("scheduled", f"branch_switched_due_in_{policy.idle_s}s")

    async def on_due(
        self, due: ExtractionDue, *, attempt: int = 1, deadline: float | None = None
    ) -> ExtractionReport:
        marker = await self._pending.get(due.tenant_id, due.thread_id)
        if marker is None or marker.user_id != due.user_id:
            return ExtractionReport("skipped", "cancelled")
        cancelled_at = await self._pending.user_cancelled_at(due.tenant_id, due.user_id)
        if cancelled_at is not None and marker.noted_at <= cancelled_at:
            return ExtractionReport("skipped", "user_cancelled")
        if marker.generation != due.generation:
            return ExtractionReport("skipped", "superseded_by_a_later_turn")
        return await self._run(
            due, attempt=attempt, policy=self.policy(due.tenant_id, due.user_id), deadline=deadline
        )

    async def _run(
        self, due: ExtractionDue, *, attempt: int, policy: MemoryPolicy, deadline: float | None
    ) -> ExtractionReport:
        run_id = memory_run_id(due.tenant_id, due.thread_id, due.generation, attempt)
        now = self._clock()
        acquired = await self._pending.acquire(
            due.tenant_id, due.thread_id, run_id, now=now, lease_until=now + timedelta(seconds=self._lease_s)
        )
        if not acquired:
            marker = await self._pending.get(due.tenant_id, due.thread_id)
            if marker is None:
                return ExtractionReport("skipped", "cancelled")
            # Another run is in flight: try again later, for the same generation (still the newest unless a
            # later turn sent its own due message, in which case this one will be dropped as superseded).
            retry = due.model_copy(update={"id": f"due_{uuid.uuid4().hex}"})
            await self._queue.send(retry, delay_s=min(policy.idle_s, BUSY_RETRY_S))
            return ExtractionReport("scheduled", "run_in_flight")
        try:
            identity = Identity(tenant_id=due.tenant_id, user_id=due.user_id)
            return await self._extraction.extract(
                identity,
                due.thread_id,
                run_id=run_id,
                request_summary=f"memory extraction, generation {due.generation}"[:160],
                deadline=deadline,
            )
        except TooManyRequests as exc:
            return await self._defer(due, exc)
        finally:
            await self._pending.release(due.tenant_id, due.thread_id, run_id)

    async def _defer(self, due: ExtractionDue, refused: TooManyRequests) -> ExtractionReport:
        """Over a budget: the messages stay pending and the due message comes back when the budget resets."""
        delay = max(1, min(refused.retry_after_s, DEFER_MAX_S))
        await self._queue.send(due.model_copy(update={"id": f"due_{uuid.uuid4().hex}"}), delay_s=delay)
        details = refused.details if isinstance(refused.details, dict) else {}
        logger.info(
            "memory extraction deferred over a budget",
            extra={"thread_id": due.thread_id, "limit": details.get("kind"), "retry_in_s": delay},
        )
        emit_limit_metric(MEMORY_EXTRACTIONS_DEFERRED, limit=str(details.get("kind")), scope=str(details.get("scope")))
        return ExtractionReport("scheduled", "deferred_over_budget", decisions={"retry_in_s": delay})


def memory_run_id(tenant_id: str, thread_id: str, generation: int, attempt: int) -> str:
    """``mem_{thread digest}_{generation}_{attempt}``: two copies of one due message attach to one run; a retry
    after a failure (the queue's receive count) gets a fresh one."""
    return f"mem_{digest(f'{tenant_id}/{thread_id}')[:16]}_{generation}_{max(attempt, 1)}"
