"""Erasure: a user deletes one of their threads, or everything the service holds about them.

``DELETE /api/v1/threads/{threadId}`` and ``DELETE /api/v1/me`` (docs/protocols/agent/api-endpoints.md §4, §9).

A thread is deleted under a claim, as a run holds it: the erasure claims the thread with its own id, so no chat
or automation worker run is admitted while it deletes; a thread with an active run is refused (``409
thread_busy``), and so is one whose memory run is in flight (the pending-extraction marker's lease). Then:

1. the pending extraction is cancelled (the marker is deleted: a due message finds nothing and drops itself);
2. the thread's shared state is deleted, then the store deletes the thread's messages (pending tool calls are
   messages), message-id markers, memory cursor, runs, and the thread item last; then the thread's images and
   files (its prefix of the attachment bucket);
3. the thread's and its runs' Redis streams are deleted.

Audit records are kept until their retention ends (``AUDIT_RETENTION_DAYS``, 400 days by default): they are the
record of what the service did (tool decisions, memory decisions, automation fires) and of this deletion itself.
The user's memories are user-level data: a thread deletion keeps them (each can be deleted on its own); a user
deletion removes them.

A user deletion first writes the user's extraction cancel time (every pending extraction noted before it never
runs), then deletes the automation tasks with their schedules (no fire can start a run any more), every thread as
above, and every memory, active or not. A busy thread is skipped and named in the ``409``; everything else is gone
by then, and repeating the request finishes the work.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Protocol

from shared.attachments.storage import thread_prefix
from shared.attachments.uploads import user_uploads_prefix
from shared.errors import Conflict
from shared.models import AuditRecord, Identity, utc_now
from shared.ports import AuditLog, ThreadStore
from shared.runs.service import LEASE_S, STALE_CLAIM_AFTER
from shared.stream_keys import run_control_key, run_stream_key, thread_stream_key

if TYPE_CHECKING:
    from shared.automation.ports import AutomationStore
    from shared.automation.service import AutomationService
    from shared.memory.ports import MemoryStore, PendingExtractions
    from shared.ports.attachments import AttachmentStore
    from shared.ports.thread_state import ThreadStateStore

logger = logging.getLogger(__name__)

THREAD_PAGE = 100
"""Threads listed per request while a user is erased."""


# A role, not a port: the one call erasure makes on the event streams (RedisEventStream and its fake have it).
class ErasableStreams(Protocol):
    async def delete(self, keys: Sequence[str]) -> None: ...


@dataclass(frozen=True)
class UserErased:
    threads: int
    memories: int
    automations: int
    busy_threads: tuple[str, ...] = ()


class Erasure:
    def __init__(
        self,
        threads: ThreadStore,
        audit: AuditLog,
        streams: ErasableStreams,
        pending: PendingExtractions,
        memories: MemoryStore,
        tasks: AutomationStore,
        automations: Callable[[], AutomationService],
        states: ThreadStateStore | None = None,
        attachments: AttachmentStore | None = None,
    ) -> None:
        self._threads = threads
        self._audit = audit
        self._states = states
        self._attachments = attachments
        self._streams = streams
        self._pending = pending
        self._memories = memories
        self._tasks = tasks
        self._automations = automations
        """Built only when the user has tasks: it needs the Scheduler's settings, which a deployment without
        automations may lack."""

    async def delete_thread(self, caller: Identity, thread_id: str) -> list[str]:
        """Delete the caller's thread; returns its deleted runs' ids.

        Raises:
            NotFound: not the caller's thread (another user's or tenant's answers the same as a missing one).
            Conflict: ``thread_busy``, a run (chat, automation or memory) is active on it.
        """
        await self._threads.get_thread(caller, thread_id)
        holder = f"erase_{uuid.uuid4().hex}"
        await self._claim(caller, thread_id, holder)
        marker = await self._pending.get(caller.tenant_id, thread_id)
        if marker is not None and marker.running(utc_now()):
            await self._threads.release_thread(caller.tenant_id, thread_id, holder)
            raise Conflict("a memory run is active on this thread", code="thread_busy")
        await self._pending.cancel_thread(caller.tenant_id, thread_id)
        if self._states is not None:
            await self._states.delete(caller.tenant_id, thread_id)
        run_ids = await self._threads.delete_thread(caller, thread_id, holder=holder)
        tenant = caller.tenant_id
        if self._attachments is not None:
            # The thread's images and files: one prefix of the bucket (shared.attachments.storage).
            await self._attachments.delete_prefix(thread_prefix(tenant, caller.user_id, thread_id))
        keys = [thread_stream_key(tenant, thread_id)]
        keys += [key for run_id in run_ids for key in (run_stream_key(tenant, run_id), run_control_key(tenant, run_id))]
        await self._streams.delete(keys)
        await self._audit.record(
            AuditRecord(
                kind="thread_deleted",
                tenant_id=tenant,
                thread_id=thread_id,
                run_id=holder,
                user_id=caller.user_id,
                details={"runs_deleted": len(run_ids), "pending_extraction_cancelled": marker is not None},
            )
        )
        logger.info("thread deleted", extra={"tenant_id": tenant, "thread_id": thread_id, "runs": len(run_ids)})
        return run_ids

    async def _claim(self, caller: Identity, thread_id: str, holder: str) -> None:
        """Hold the thread as a run would; a holder whose lease expired (its process died) is taken over."""
        now = utc_now()
        if await self._threads.claim_thread(caller, thread_id, holder, stale_before=now - STALE_CLAIM_AFTER):
            return
        cutoff = now - timedelta(seconds=LEASE_S)
        if await self._threads.take_over_thread(caller, thread_id, holder, lease_expired_before=cutoff) is None:
            raise Conflict("a run is active on this thread", code="thread_busy")

    async def delete_user(self, caller: Identity) -> UserErased:
        """Delete everything the caller owns (see the module docstring); ``busy_threads`` were left in place."""
        await self._pending.cancel_user(caller.tenant_id, caller.user_id, now=utc_now())
        automations = await self._delete_automations(caller)
        deleted, busy = 0, []
        for thread_id in await self._thread_ids(caller):
            try:
                await self.delete_thread(caller, thread_id)
                deleted += 1
            except Conflict:
                busy.append(thread_id)
        if self._attachments is not None:
            # Uploads not yet attached (their own prefix, which the lifecycle rule would expire within a day).
            await self._attachments.delete_prefix(user_uploads_prefix(caller.tenant_id, caller.user_id))
        memories = await self._memories.list_memories(caller.tenant_id, caller.user_id, include_inactive=True)
        for memory in memories:
            await self._memories.delete(caller.tenant_id, caller.user_id, memory.id)
        logger.info(
            "user deleted",
            extra={"tenant_id": caller.tenant_id, "threads": deleted, "busy": len(busy), "memories": len(memories)},
        )
        return UserErased(deleted, len(memories), automations, tuple(busy))

    async def _delete_automations(self, caller: Identity) -> int:
        deleted = 0
        while True:
            tasks, _ = await self._tasks.list(caller.tenant_id, caller.user_id, limit=100, cursor=None)
            if not tasks:
                return deleted
            for task in tasks:
                await self._automations().delete(caller, task.task_id)
                deleted += 1

    async def _thread_ids(self, caller: Identity) -> list[str]:
        ids: list[str] = []
        cursor: str | None = None
        while True:
            threads, cursor = await self._threads.list_threads(caller, limit=THREAD_PAGE, cursor=cursor)
            ids += [t.thread_id for t in threads]
            if cursor is None:
                return ids
