"""What a caller may read of a thread: its visible history page by page, the list of its threads, its audit view and
its live events. The routes of ``functions/agent_api/routes_threads.py`` translate these to HTTP and back."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from shared.auth import AUDIT_SCOPE
from shared.errors import Forbidden, InvalidRequest
from shared.models import AuditRecord, Identity, Message, Run, Thread
from shared.ports import AuditLog, ConversationStore, StreamEntry
from shared.runs.intake import check_stream_id
from shared.stream_keys import thread_stream_key


# A role, not a port: the conversation store, the audit log and the run list, as ThreadService reads them
# (AggregateStore has it).
class ThreadReads(ConversationStore, AuditLog, Protocol):
    async def list_runs_for_thread(self, tenant_id: str, thread_id: str, *, limit: int) -> list[Run]: ...


# A role, not a port: RunService implements it, no adapter does.
class StreamTailer(Protocol):
    """The part of ``shared.runs.service.RunService`` that follows a stream."""

    def tail(
        self, key: str, *, after: str = "0-0", until_terminal: bool = True, deadline: float | None = None
    ) -> AsyncIterator[StreamEntry | None]: ...


@dataclass(frozen=True)
class HistoryPage:
    messages: list[Message]
    """The visible messages of the page (hidden runs' messages left out), oldest first."""
    next_cursor: str | None


@dataclass(frozen=True)
class ThreadAudit:
    messages: list[Message]
    """Every message, hidden ones included."""
    decisions: list[AuditRecord]
    runs: list[Run]


def encode_cursor(seq: int) -> str:
    """An opaque history cursor: the sequence number of the page's last message."""
    return base64.urlsafe_b64encode(f"seq:{seq}".encode()).decode()


def decode_cursor(cursor: str) -> int:
    """The sequence number a history cursor names; ``InvalidRequest`` ``invalid_cursor`` for anything else."""
    try:
        text = base64.urlsafe_b64decode(cursor.encode()).decode()
        if not text.startswith("seq:"):
            raise ValueError(text)
        return int(text[4:])
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidRequest("malformed cursor", code="invalid_cursor") from exc


class ThreadService:
    """The caller's threads; another user's or tenant's thread is ``NotFound`` (the store's ``get_thread``)."""

    def __init__(self, store: ThreadReads, runs: StreamTailer) -> None:
        self._store = store
        self._runs = runs

    async def history(self, caller: Identity, thread_id: str, *, limit: int, cursor: str | None) -> HistoryPage:
        await self._store.get_thread(caller, thread_id)
        after = decode_cursor(cursor) if cursor else 0
        page = await self._store.read_forward(caller.tenant_id, thread_id, after_seq=after, limit=limit)
        visible = [m for m in page if not m.meta.hidden_from_user]
        return HistoryPage(visible, encode_cursor(page[-1].seq) if len(page) == limit else None)

    async def list(self, caller: Identity, *, limit: int, cursor: str | None) -> tuple[list[Thread], str | None]:
        return await self._store.list_threads(caller, limit=limit, cursor=cursor)

    async def audit(self, caller: Identity, thread_id: str, *, limit: int) -> ThreadAudit:
        """Everything recorded on the thread, hidden runs included: only for callers with the audit scope."""
        if not caller.has_scope(AUDIT_SCOPE):
            raise Forbidden(f"the audit endpoint needs the {AUDIT_SCOPE} scope", code="missing_scope")
        await self._store.get_thread(caller, thread_id)
        tenant = caller.tenant_id
        return ThreadAudit(
            messages=await self._store.read_forward(tenant, thread_id, after_seq=0, limit=limit),
            decisions=await self._store.list_for_thread(tenant, thread_id, limit=limit),
            runs=await self._store.list_runs_for_thread(tenant, thread_id, limit=limit),
        )

    async def events(
        self, caller: Identity, thread_id: str, *, after: str | None, deadline: float | None
    ) -> AsyncIterator[StreamEntry | None]:
        """The live events of every run of the caller's thread after the stream id ``after`` (all when None)."""
        await self._store.get_thread(caller, thread_id)
        cursor = check_stream_id(after or "0-0")
        key = thread_stream_key(caller.tenant_id, thread_id)
        return self._runs.tail(key, after=cursor, until_terminal=False, deadline=deadline)
