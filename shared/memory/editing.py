"""Memories users can correct: an edit writes a new version and supersedes the old one, and is audited.

``PATCH /api/v1/memories/{id}`` calls :meth:`MemoryEditor.edit`. The old version is never changed in place: it
is marked ``superseded`` (``superseded_by`` the new id, ``status_reason`` "edited by the user"), and the new
version links back (``supersedes``) and says who wrote it (``edited_by``). One ``memory_edit`` audit record says
who changed what (ids, kinds, a preview and a digest of the old and the new text), in the audit trail of the
thread the memory came from (``GET /threads/{id}/audit``), or of the pseudo-thread :data:`NO_THREAD` for a
memory without one.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from shared.errors import Conflict, NotFound
from shared.executors.model_turn import new_id
from shared.memory.models import MAX_CONTENT_CHARS, Deactivation, Memory, MemoryKind, MemoryStatus
from shared.memory.ports import MemoryStore
from shared.models import AuditRecord, Identity, digest, utc_now
from shared.ports import AuditLog

AUDIT_KIND = "memory_edit"
NO_THREAD = "-memories-"
EDIT_REASON = "edited by the user"


class MemoryEditor:
    def __init__(
        self,
        store: MemoryStore,
        audit: AuditLog,
        *,
        clock: Callable[[], datetime] = utc_now,
        new_memory_id: Callable[[], str] = lambda: new_id("mem"),
    ) -> None:
        self._store = store
        self._audit = audit
        self._clock = clock
        self._new_id = new_memory_id

    async def edit(self, identity: Identity, memory_id: str, *, content: str, kind: MemoryKind | None = None) -> Memory:
        """Write the caller's corrected text as a new active version of ``memory_id``; returns it.

        Raises ``NotFound`` for an unknown memory or someone else's (the key includes the user) and ``Conflict``
        (``memory_not_active``) for a memory that is already superseded or retracted.
        """
        text = " ".join(content.split())
        if not text or len(text) > MAX_CONTENT_CHARS:
            raise ValueError(f"content must be 1-{MAX_CONTENT_CHARS} characters")
        old = await self._active(identity, memory_id)
        now = self._clock()
        new = Memory(
            id=self._new_id(),
            tenant_id=identity.tenant_id,
            user_id=identity.user_id,
            kind=kind or old.kind,
            content=text,
            confidence=1.0,
            evidence_quote=text,
            thread_id=old.thread_id,
            supersedes=old.id,
            edited_by=identity.user_id,
            created_at=now,
            updated_at=now,
        )
        await self._store.put(new)
        await self._supersede(identity, old, new)
        await self._audit.record(_edit_record(identity, old, new, now))
        return new

    async def _active(self, identity: Identity, memory_id: str) -> Memory:
        """The caller's memory ``memory_id``, which must be its current (active) version."""
        old = await self._store.get(identity.tenant_id, identity.user_id, memory_id)
        if old is None:
            raise NotFound("memory not found")
        if not old.is_active:
            raise Conflict(f"memory is {old.status.value}; edit its current version", code="memory_not_active")
        return old

    async def _supersede(self, identity: Identity, old: Memory, new: Memory) -> None:
        """Mark ``old`` superseded by the stored ``new``; if ``old`` changed meanwhile, take ``new`` back."""
        replaced = await self._store.deactivate(
            identity.tenant_id,
            identity.user_id,
            old.id,
            Deactivation(
                status=MemoryStatus.SUPERSEDED,
                reason=EDIT_REASON,
                run_id=f"edit_{new.id}",
                evidence_quote=new.content,
                source_message_ids=(),
                superseded_by=new.id,
            ),
        )
        if replaced is None:  # changed (or deleted) between the read and the write: keep one active version
            await self._store.delete(identity.tenant_id, identity.user_id, new.id)
            raise Conflict("memory changed concurrently; read it again", code="memory_not_active")


def _edit_record(identity: Identity, old: Memory, new: Memory, now: datetime) -> AuditRecord:
    """The ``memory_edit`` audit record: who changed what, with previews and digests of both texts."""
    return AuditRecord(
        kind=AUDIT_KIND,
        tenant_id=identity.tenant_id,
        thread_id=old.thread_id or NO_THREAD,
        run_id=f"edit_{new.id}",
        user_id=identity.user_id,
        at=now,
        details={
            "edited_by": identity.user_id,
            "memory_id": new.id,
            "supersedes": old.id,
            "old_kind": old.kind.value,
            "new_kind": new.kind.value,
            "old_content_preview": old.content[:120],
            "new_content_preview": new.content[:120],
            "old_content_digest": digest(old.content),
            "new_content_digest": digest(new.content),
        },
    )
