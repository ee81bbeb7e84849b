"""What a caller may read of a thread: its visible history page by page, the list of its threads, its audit view and
its live events. The routes of ``functions/agent_api/routes_threads.py`` translate these to HTTP and back."""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from shared import feedback_export
from shared.attachments.read_urls import MAX_READ_URL_TTL_S, presigned_read_urls
from shared.auth import AUDIT_SCOPE, require_admin
from shared.branch_history import BranchPage, branch_page, read_tree
from shared.context_window import BranchReader
from shared.errors import Forbidden, InvalidRequest, NotFound
from shared.message_snapshot import SNAPSHOT_MESSAGES, messages_snapshot
from shared.message_tree import newest_leaf_under
from shared.models import AuditRecord, Feedback, FeedbackEntry, Identity, Message, Role, Run, Thread, utc_now
from shared.ports import AuditLog, ConversationStore, RunLedger, StreamEntry
from shared.ports.attachments import AttachmentStore
from shared.ports.thread_state import ThreadStateStore
from shared.runs.intake import check_stream_id
from shared.stream_keys import thread_stream_key
from shared.thread_fields import ThreadChanges
from shared.thread_search import LISTING, ThreadCriteria
from shared.thread_state.models import EMPTY_STATE, StoredState
from shared.tracing.api import span


# A role, not a port: RunService implements it, no adapter does.
class StreamTailer(Protocol):
    """The part of ``shared.runs.service.RunService`` that follows a stream."""

    def tail(
        self, key: str, *, after: str = "0-0", until_terminal: bool = True, deadline: float | None = None
    ) -> AsyncIterator[StreamEntry | None]: ...

    async def oldest_retained(self, key: str) -> str | None: ...


@dataclass(frozen=True)
class HistoryPage:
    messages: list[Message]
    """The visible messages of the page (hidden runs' messages left out), oldest first, on one branch, each with its
    ``parent_id`` resolved."""
    next_cursor: str | None
    state: StoredState = EMPTY_STATE
    """The thread's shared state now (``{}`` and version 0 when it never had one)."""
    leaf_id: str | None = None
    """The last message of the branch shown."""
    siblings: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """For the messages of the page that have siblings: the ids of all of them, oldest first."""
    part_urls: dict[str, str] = field(default_factory=dict)
    """Presigned GETs of the page's stored parts, by key (``shared.attachments.read_urls``); a part without one is
    read through the API's parts route."""


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

    def __init__(
        self,
        threads: ConversationStore,
        runs: RunLedger,
        audit: AuditLog,
        tailer: StreamTailer,
        states: ThreadStateStore | None = None,
        on_branch_switched: Callable[[Identity, str, str], Awaitable[object]] | None = None,
        attachments: AttachmentStore | None = None,
        part_url_ttl_s: int = MAX_READ_URL_TTL_S,
    ) -> None:
        """``threads``, ``runs`` and ``audit``: the main table's three aggregates, read only; ``tailer``: the run
        service, which follows a thread's live events; ``on_branch_switched``: told (caller, thread, new leaf) after
        a switch (the memory trigger: docs/memory.md, "Memories and branches"); it must not raise."""
        self._threads = threads
        self._runs = runs
        self._audit = audit
        self._tailer = tailer
        self._states = states
        self._on_branch_switched = on_branch_switched
        self._attachments = attachments
        self._part_url_ttl_s = part_url_ttl_s

    async def history(
        self, caller: Identity, thread_id: str, *, limit: int, cursor: str | None, leaf: str | None = None
    ) -> HistoryPage:
        """A page of the caller's visible history on the thread's current branch (``leaf``: on the branch that ends
        at that message; NotFound when the thread has no such message), and the thread's state (read beside)."""
        thread = await self._threads.get_thread(caller, thread_id)
        after = decode_cursor(cursor) if cursor else 0
        page, state = await asyncio.gather(
            branch_page(self._threads, thread, leaf_id=leaf, after_seq=after, limit=limit),
            self._states.read(caller, thread_id) if self._states is not None else _no_state(),
            return_exceptions=True,
        )
        for outcome in (page, state):
            if isinstance(outcome, BaseException):
                raise outcome
        assert isinstance(page, BranchPage)
        visible = [m for m in page.messages if not m.meta.hidden_from_user]
        next_cursor = encode_cursor(page.messages[-1].seq) if page.more and page.messages else None
        urls = await presigned_read_urls(self._attachments, visible, expires_s=self._part_url_ttl_s)
        return HistoryPage(visible, next_cursor, state or EMPTY_STATE, page.leaf_id, page.siblings, urls)

    async def message_part(self, caller: Identity, thread_id: str, message_id: str, index: int) -> tuple[bytes, str]:
        """The bytes and type of a stored part of a message of the caller's thread (``NotFound`` for another user's
        thread, an unknown message or part, or a part whose source is a client's URL)."""
        await self._threads.get_thread(caller, thread_id)
        found = await self._threads.stored_messages(caller.tenant_id, thread_id, [message_id])
        parts = found[0].parts if found else ()
        key = parts[index].key if 0 <= index < len(parts) else None
        stored = await self._attachments.get(key) if key is not None and self._attachments is not None else None
        if stored is None:
            raise NotFound("part not found")
        return stored

    async def switch_branch(
        self, caller: Identity, thread_id: str, leaf_id: str, *, limit: int, through: bool = False
    ) -> HistoryPage:
        """Make the branch that ends at ``leaf_id`` the thread's current one (``through``: the branch through it, on
        to its newest descendant) (``409 thread_busy`` while a run holds the thread; NotFound for an unknown
        message or someone else's thread), audited; its first history page."""
        thread = await self._threads.get_thread(caller, thread_id)
        if through:
            below = newest_leaf_under(await read_tree(self._threads, caller.tenant_id, thread_id), leaf_id)
            if below is None:
                raise NotFound("message not found")
            leaf_id = below
        await self._threads.set_leaf(caller, thread_id, leaf_id, holder=None)
        await self._audit.record(
            AuditRecord(
                kind="branch_switched",
                tenant_id=caller.tenant_id,
                thread_id=thread_id,
                run_id="",
                user_id=caller.user_id,
                details={"from_leaf_id": thread.leaf_id, "to_leaf_id": leaf_id},
            )
        )
        if self._on_branch_switched is not None and leaf_id != thread.leaf_id:
            await self._on_branch_switched(caller, thread_id, leaf_id)
        return await self.history(caller, thread_id, limit=limit, cursor=None)

    async def get(self, caller: Identity, thread_id: str) -> Thread:
        return await self._threads.get_thread(caller, thread_id)

    async def update(self, caller: Identity, thread_id: str, changes: ThreadChanges) -> Thread:
        """Change the caller's thread's title, metadata, archived or pinned (NotFound when not theirs), audited with
        the fields changed (not their values: a title can be personal)."""
        thread = await self._threads.update_thread(caller, thread_id, changes)
        await self._audit.record(
            AuditRecord(
                kind="thread_updated",
                tenant_id=caller.tenant_id,
                thread_id=thread_id,
                run_id="",
                user_id=caller.user_id,
                details={"fields": changes.fields, "metadata_keys": sorted(changes.metadata)},
            )
        )
        return thread

    async def give_feedback(
        self, caller: Identity, thread_id: str, message_id: str, feedback: Feedback | None
    ) -> Message:
        """The caller's feedback on an answer of their thread, replacing theirs (None: removed); audited with the
        score (not the comment) so a thread's audit shows when an answer was judged."""
        with span("thread.feedback", {"thread.id": thread_id, "message.id": message_id}) as traced:
            message = await self._threads.set_feedback(caller, thread_id, message_id, feedback)
            # On the request's trace, naming the run: the run's own trace ended with it (its context is not kept).
            traced.event(
                "feedback",
                {
                    "run.id": message.run_id or "",
                    "execution_profile.name": message.meta.execution_profile_name or "",
                    "feedback.score": feedback.score if feedback else 0,
                    "feedback.removed": feedback is None,
                },
            )
        await self._audit.record(
            AuditRecord(
                kind="feedback_given" if feedback else "feedback_removed",
                tenant_id=caller.tenant_id,
                thread_id=thread_id,
                run_id=message.run_id or "",
                user_id=caller.user_id,
                details={"message_id": message_id, **({"score": feedback.score} if feedback else {})},
            )
        )
        return message

    async def export_feedback(
        self, admin: Identity, since: str | None, until: str | None, *, limit: int, cursor: str | None
    ) -> tuple[list[FeedbackEntry], str | None]:
        """The feedback of the administrator's tenant given between ``since`` and ``until`` (``export_range``),
        oldest first, a page at a time (the next page's cursor, or None on the last). Only for callers with the
        admin scope (checked before anything else), and only their tenant's."""
        require_admin(admin)
        span_of = feedback_export.export_range(since, until, utc_now())
        after = feedback_export.decode_cursor(cursor) if cursor else None
        low, high = feedback_export.time_key(span_of.since), feedback_export.time_key(span_of.until)
        if after is not None and not low <= after <= high:
            # A start outside the range would be refused by DynamoDB: the cursor was not made for this range.
            raise InvalidRequest("the cursor is not one of this export's", code="invalid_cursor")
        entries, last = await self._threads.list_feedback(
            admin.tenant_id, since=span_of.since, until=span_of.until, limit=limit, after=after
        )
        return entries, feedback_export.encode_cursor(last) if last else None

    async def search(
        self, caller: Identity, criteria: ThreadCriteria, *, limit: int, cursor: str | None
    ) -> tuple[list[Thread], str | None]:
        return await self._threads.search_threads(caller, criteria, limit=limit, cursor=cursor)

    async def list(self, caller: Identity, *, limit: int, cursor: str | None) -> tuple[list[Thread], str | None]:
        """The sidebar: unarchived threads, pinned first, then the most recent (``thread_search.LISTING``)."""
        return await self._threads.search_threads(caller, LISTING, limit=limit, cursor=cursor)

    async def audit(self, caller: Identity, thread_id: str, *, limit: int) -> ThreadAudit:
        """Everything recorded on the thread, hidden runs included: only for callers with the audit scope."""
        if not caller.has_scope(AUDIT_SCOPE):
            raise Forbidden(f"the audit endpoint needs the {AUDIT_SCOPE} scope", code="missing_scope")
        await self._threads.get_thread(caller, thread_id)
        tenant = caller.tenant_id
        return ThreadAudit(
            messages=await self._threads.read_forward(tenant, thread_id, after_seq=0, limit=limit),
            decisions=await self._audit.list_for_thread(tenant, thread_id, limit=limit),
            runs=await self._runs.list_runs_for_thread(tenant, thread_id, limit=limit),
        )

    async def events(
        self,
        caller: Identity,
        thread_id: str,
        *,
        after: str | None,
        deadline: float | None,
        snapshot: bool = False,
    ) -> AsyncIterator[StreamEntry | None]:
        """The live events of every run of the caller's thread after the stream id ``after`` (all when None).

        An ``after`` older than what the stream still holds (or a stream that holds nothing) is answered as
        ``snapshot`` without ``after``: the stored conversation, then the events from where it was taken, with
        no gap and no repeat (docs/protocols/agent/api-endpoints.md §4).

        ``snapshot``: first a ``MESSAGES_SNAPSHOT`` of the visible stored conversation, then the events from where
        it was taken (without ``after``: from the start of the run active on the thread, whose messages the
        snapshot leaves out but for its input, else from now); its SSE id is that cursor."""
        thread = await self._threads.get_thread(caller, thread_id)
        key = thread_stream_key(caller.tenant_id, thread_id)
        cursor = check_stream_id(after or "0-0")
        if cursor != "0-0" and await self._missed(key, cursor):
            # The stream no longer holds what followed the client's last id (trimmed, or expired with the
            # thread's retention): the record catches it up, as a snapshot without Last-Event-ID would.
            after, snapshot = None, True
        if not snapshot:
            return self._tailer.tail(key, after=cursor, until_terminal=False, deadline=deadline)
        opening = await self._snapshot(caller, thread, after)
        return _after(opening, self._tailer.tail(key, after=opening.id, until_terminal=False, deadline=deadline))

    async def _missed(self, key: str, cursor: str) -> bool:
        """Whether entries after ``cursor`` may be gone from the stream: it holds nothing, or its oldest entry is
        newer than ``cursor`` (Redis trims and expires from the oldest end, so an older oldest entry proves that
        everything after ``cursor`` is still there)."""
        oldest = await self._tailer.oldest_retained(key)
        return oldest is None or _entry_order(oldest) > _entry_order(cursor)

    async def _snapshot(self, caller: Identity, thread: Thread, after: str | None) -> StreamEntry:
        """The ``MESSAGES_SNAPSHOT`` entry, its id the cursor the live events go on from."""
        tenant = caller.tenant_id
        active = await self._runs.get_run(tenant, thread.active_run_id) if thread.active_run_id else None
        if active is not None and active.status.is_terminal:
            active = None
        if after is not None:
            cursor = check_stream_id(after)
        elif active is not None:
            cursor = f"{int(active.created_at.timestamp() * 1000)}-0"
        else:
            cursor = f"{int(time.time() * 1000)}-0"
        branch = BranchReader(self._threads, thread.leaf_id)  # the current branch only
        newest = await branch.read_back(tenant, thread.thread_id, before_seq=None, limit=SNAPSHOT_MESSAGES)
        skipped = active.run_id if active is not None and after is None else None
        stored = [m for m in reversed(newest) if skipped is None or not _said_by_run(m, skipped)]
        # Parts get the same URLs as the history's: presigned GETs where the store makes them (AWS), else the route.
        urls = await presigned_read_urls(self._attachments, stored, expires_s=self._part_url_ttl_s)
        event = messages_snapshot(stored, urls).model_dump(mode="json", by_alias=True, exclude_none=True)
        return StreamEntry(id=cursor, event=event)


def _said_by_run(msg: Message, run_id: str) -> bool:
    """What a run's own events carry (its answers and server tool results), which the live events replay; its
    input (the user's message, front-end tool results) is on no stream, so the snapshot keeps it."""
    return msg.run_id == run_id and msg.role is not Role.USER and not msg.flags.get("frontend_result")


def _entry_order(entry_id: str) -> tuple[int, int]:
    """A stream entry id (``"<ms>-<seq>"``, checked) as a comparable pair."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


async def _no_state() -> StoredState | None:
    return None


async def _after(first: StreamEntry, rest: AsyncIterator[StreamEntry | None]) -> AsyncIterator[StreamEntry | None]:
    yield first
    async for entry in rest:
        yield entry
