"""The three aggregates of the main table seen as one store, for the components that span them.

The run service and the sweeper use threads, runs and audit together (``shared.ports.store.RunStore``); the thread
view and erasure use two of them. ``AggregateStore`` holds one adapter per aggregate and forwards each call to the
one that owns it: it stores nothing itself and adds no request. Components that need one aggregate are given that
adapter's port, typed narrowly; the composition root (``shared.wiring``) builds the parts and this view over them.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from shared.models import AuditRecord, Identity, Message, Run, Thread, ThreadClaim, ThreadTakeover, Usage
from shared.ports.audit import AuditLog
from shared.ports.runs import RunLedger
from shared.ports.threads import AdmittedRun, ThreadStore


class AggregateStore:
    """Threads and messages (``threads``), run records (``runs``) and audit records (``audit``) behind one object."""

    def __init__(self, threads: ThreadStore, runs: RunLedger, audit: AuditLog) -> None:
        self.threads = threads
        self.runs = runs
        self.audit = audit

    # ---- threads and messages ------------------------------------------------------------------------------

    async def open_thread(self, identity: Identity, thread_id: str) -> Thread:
        return await self.threads.open_thread(identity, thread_id)

    async def get_thread(self, identity: Identity, thread_id: str) -> Thread:
        return await self.threads.get_thread(identity, thread_id)

    async def list_threads(
        self, identity: Identity, *, limit: int, cursor: str | None
    ) -> tuple[list[Thread], str | None]:
        return await self.threads.list_threads(identity, limit=limit, cursor=cursor)

    async def claim_thread(self, identity: Identity, thread_id: str, run_id: str, *, stale_before: datetime) -> bool:
        return await self.threads.claim_thread(identity, thread_id, run_id, stale_before=stale_before)

    async def open_and_claim(
        self, identity: Identity, thread_id: str, run_id: str, *, stale_before: datetime
    ) -> ThreadClaim | None:
        return await self.threads.open_and_claim(identity, thread_id, run_id, stale_before=stale_before)

    async def forget_thread(self, identity: Identity, thread_id: str, run_id: str) -> None:
        await self.threads.forget_thread(identity, thread_id, run_id)

    async def take_over_thread(
        self, identity: Identity, thread_id: str, run_id: str, *, lease_expired_before: datetime
    ) -> ThreadTakeover | None:
        return await self.threads.take_over_thread(
            identity, thread_id, run_id, lease_expired_before=lease_expired_before
        )

    async def release_thread(self, tenant_id: str, thread_id: str, run_id: str) -> None:
        await self.threads.release_thread(tenant_id, thread_id, run_id)

    async def delete_thread(self, identity: Identity, thread_id: str, *, holder: str) -> list[str]:
        return await self.threads.delete_thread(identity, thread_id, holder=holder)

    async def known_message_ids(self, tenant_id: str, thread_id: str, ids: Sequence[str]) -> set[str]:
        return await self.threads.known_message_ids(tenant_id, thread_id, ids)

    async def append_messages(self, identity: Identity, thread_id: str, messages: Sequence[Message]) -> list[Message]:
        return await self.threads.append_messages(identity, thread_id, messages)

    async def admit_messages(
        self, identity: Identity, thread_id: str, messages: Sequence[Message], run: Run, *, last_seq: int
    ) -> AdmittedRun:
        return await self.threads.admit_messages(identity, thread_id, messages, run, last_seq=last_seq)

    async def read_back(self, tenant_id: str, thread_id: str, *, before_seq: int | None, limit: int) -> list[Message]:
        return await self.threads.read_back(tenant_id, thread_id, before_seq=before_seq, limit=limit)

    async def read_forward(self, tenant_id: str, thread_id: str, *, after_seq: int, limit: int) -> list[Message]:
        return await self.threads.read_forward(tenant_id, thread_id, after_seq=after_seq, limit=limit)

    # ---- runs ----------------------------------------------------------------------------------------------

    async def create_run(self, run: Run) -> tuple[Run, bool]:
        return await self.runs.create_run(run)

    async def get_run(self, tenant_id: str, run_id: str) -> Run | None:
        return await self.runs.get_run(tenant_id, run_id)

    async def finish_run(
        self,
        tenant_id: str,
        run_id: str,
        *,
        status: str,
        usage: list[Usage],
        last_stream_id: str | None,
        error_code: str | None = None,
    ) -> None:
        await self.runs.finish_run(
            tenant_id, run_id, status=status, usage=usage, last_stream_id=last_stream_id, error_code=error_code
        )

    async def heartbeat(self, tenant_id: str, run_id: str, *, last_stream_id: str | None) -> Run:
        return await self.runs.heartbeat(tenant_id, run_id, last_stream_id=last_stream_id)

    async def request_cancel(self, tenant_id: str, run_id: str) -> None:
        await self.runs.request_cancel(tenant_id, run_id)

    async def list_stale_runs(self, *, stale_before: datetime, limit: int) -> list[Run]:
        return await self.runs.list_stale_runs(stale_before=stale_before, limit=limit)

    async def abandon_run(self, tenant_id: str, run_id: str, *, stale_before: datetime, error_code: str) -> bool:
        return await self.runs.abandon_run(tenant_id, run_id, stale_before=stale_before, error_code=error_code)

    async def list_runs_for_thread(self, tenant_id: str, thread_id: str, *, limit: int) -> list[Run]:
        return await self.runs.list_runs_for_thread(tenant_id, thread_id, limit=limit)

    # ---- audit ---------------------------------------------------------------------------------------------

    async def record(self, record: AuditRecord) -> None:
        await self.audit.record(record)

    async def list_for_thread(self, tenant_id: str, thread_id: str, *, limit: int) -> list[AuditRecord]:
        return await self.audit.list_for_thread(tenant_id, thread_id, limit=limit)
