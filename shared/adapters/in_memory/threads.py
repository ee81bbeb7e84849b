"""In-memory threads and messages: the reference fake of ``ThreadStore`` (shared/ports/threads.py).

It runs the same contract suite as ``DynamoDBThreads`` (tests/contract/test_thread_store_contract.py), so it keeps
that adapter's semantics: tenant-scoped keys, NotFound for someone else's thread, an opaque per-user cursor,
idempotent appends numbered by a per-thread counter, content capped at ``MAX_CONTENT_CHARS``, and the requests the
DynamoDB adapter would send counted on the shared meter. Like that adapter it is given the run ledger of the same
table: the admission stores a run with the messages, the takeover reads the holder's lease, deletion removes runs.

Every method does its work without awaiting in between, so each call is atomic on the event loop; a yield before
the work stands in for the network round trip and lets concurrent tasks interleave between calls, as they would.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from shared import thread_search
from shared.adapters.in_memory.meter import RequestMeter
from shared.adapters.in_memory.runs import InMemoryRunLedger
from shared.adapters.in_memory.thread_feedback import entry_for, page_of
from shared.adapters.in_memory.thread_listing import decode_cursor, encode_cursor, listing_key, partition_of
from shared.adapters.in_memory.thread_records import ThreadRecord, capped
from shared.errors import Conflict, InvalidRequest, NotFound
from shared.message_tree import branches_off, link_messages
from shared.models import (
    Feedback,
    FeedbackEntry,
    Identity,
    Message,
    Run,
    Thread,
    ThreadClaim,
    ThreadTakeover,
    utc_now,
)
from shared.ports.threads import AdmittedRun, RunMessageIds
from shared.thread_fields import (
    GENERATED_TITLE,
    ThreadChanges,
    apply_changes,
    check_answer,
    last_visible,
    may_generate_title,
)

# The DynamoDB adapter appends in transactions of this many messages, two requests each (read counter, write).
_MESSAGES_PER_TRANSACTION = 40
# One BatchGetItem reads at most this many keys.
_IDS_PER_BATCH_GET = 100

ThreadKey = tuple[str, str]


class InMemoryThreads:
    """Threads and their messages keyed by tenant, in dictionaries; runs in ``ledger``."""

    def __init__(self, ledger: InMemoryRunLedger, meter: RequestMeter | None = None) -> None:
        self._threads: dict[ThreadKey, ThreadRecord] = {}
        self._ledger = ledger
        self._meter = meter or RequestMeter()

    @property
    def request_count(self) -> int:
        return self._meter.request_count

    # ---- threads -------------------------------------------------------------------------------------------

    async def open_thread(self, identity: Identity, thread_id: str) -> Thread:
        await self._meter.request()
        key = (identity.tenant_id, thread_id)
        if key not in self._threads:
            now = utc_now()
            thread = Thread(
                tenant_id=identity.tenant_id,
                thread_id=thread_id,
                owner_user_id=identity.user_id,
                created_at=now,
                updated_at=now,
            )
            self._threads[key] = ThreadRecord(thread=thread)
            return thread
        return await self.get_thread(identity, thread_id)

    def _owned(self, identity: Identity, thread_id: str) -> ThreadRecord:
        state = self._threads.get((identity.tenant_id, thread_id))
        if state is None or state.thread.owner_user_id != identity.user_id:
            raise NotFound("thread not found")
        return state

    async def get_thread(self, identity: Identity, thread_id: str) -> Thread:
        await self._meter.request()
        return self._owned(identity, thread_id).thread

    async def list_threads(
        self, identity: Identity, *, limit: int, cursor: str | None
    ) -> tuple[list[Thread], str | None]:
        partition = partition_of(identity)
        after = decode_cursor(cursor, partition) if cursor else None
        await self._meter.request()
        mine = sorted(
            (
                s.thread
                for (tenant, _), s in self._threads.items()
                if tenant == identity.tenant_id and s.thread.owner_user_id == identity.user_id
            ),
            key=listing_key,
            reverse=True,
        )
        if after is not None:
            mine = [t for t in mine if listing_key(t) < after]
        page = mine[:limit]
        more = len(mine) > limit
        cursor_out = encode_cursor(partition, listing_key(page[-1])) if more and page else None
        # As the thread-list index projects them: the counter and the claim are not part of a listing.
        listed = [self._threads[(t.tenant_id, t.thread_id)].listed_last for t in page]
        return [
            t.model_copy(update={"last_seq": 0, "active_run_id": None, "last_message": last, "message_count": count})
            for t, (last, count) in zip(page, listed, strict=True)
        ], cursor_out

    async def claim_thread(self, identity: Identity, thread_id: str, run_id: str, *, stale_before: datetime) -> bool:
        """Mark ``run_id`` as the thread's active run; False when another live run holds it."""
        await self._meter.request()
        state = self._threads.get((identity.tenant_id, thread_id))
        if state is None or state.thread.owner_user_id != identity.user_id:
            return False
        holder = state.thread.active_run_id
        stale = state.active_run_at is not None and state.active_run_at < stale_before
        if holder is not None and holder != run_id and not stale:
            return False
        state.thread = state.thread.model_copy(update={"active_run_id": run_id})
        state.active_run_at = utc_now()
        return True

    async def open_and_claim(
        self, identity: Identity, thread_id: str, run_id: str, *, stale_before: datetime
    ) -> ThreadClaim | None:
        """Open (creating when new) and claim the thread in one request; see the DynamoDB adapter."""
        await self._meter.request()
        key = (identity.tenant_id, thread_id)
        state = self._threads.get(key)
        created = state is None
        if state is None:
            now = utc_now()
            thread = Thread(
                tenant_id=identity.tenant_id,
                thread_id=thread_id,
                owner_user_id=identity.user_id,
                created_at=now,
                updated_at=now,
            )
            state = self._threads[key] = ThreadRecord(thread=thread)
        if state.thread.owner_user_id != identity.user_id:
            await self._meter.request()  # the adapter reads the thread to tell a refusal from a busy thread
            raise NotFound("thread not found")
        holder = state.thread.active_run_id
        stale = state.active_run_at is not None and state.active_run_at < stale_before
        if holder is not None and holder != run_id and not stale:
            await self._meter.request()
            return None
        state.thread = state.thread.model_copy(update={"active_run_id": run_id})
        state.active_run_at = utc_now()
        return ThreadClaim(
            last_seq=state.thread.last_seq,
            newly_claimed=holder != run_id,
            created=created,
            leaf_id=state.thread.leaf_id,
            user_digest=state.user_digest,
        )

    async def forget_thread(self, identity: Identity, thread_id: str, run_id: str) -> None:
        """Delete a thread an admission created and then refused (see the DynamoDB adapter)."""
        await self._meter.request()
        key = (identity.tenant_id, thread_id)
        state = self._threads.get(key)
        if (
            state is not None
            and state.thread.owner_user_id == identity.user_id
            and state.thread.active_run_id == run_id
            and state.thread.last_seq == 0
        ):
            del self._threads[key]

    async def take_over_thread(
        self, identity: Identity, thread_id: str, run_id: str, *, lease_expired_before: datetime
    ) -> ThreadTakeover | None:
        """Give the thread to ``run_id`` if its holder's lease expired (see the DynamoDB adapter)."""
        await self._meter.request()
        state = self._threads.get((identity.tenant_id, thread_id))
        if state is None or state.thread.owner_user_id != identity.user_id:
            return None
        holder = state.thread.active_run_id
        if holder is None or holder == run_id:
            return None
        await self._meter.request()
        stored = self._ledger._runs.get((identity.tenant_id, holder))
        if stored is None:
            expired = state.active_run_at is None or state.active_run_at < lease_expired_before
        else:
            expired = stored.status.is_terminal or stored.heartbeat_at < lease_expired_before
        if not expired:
            return None
        await self._meter.request()
        if state.thread.active_run_id != holder:  # another run took it over meanwhile (a conditional write)
            return None
        state.thread = state.thread.model_copy(update={"active_run_id": run_id})
        state.active_run_at = utc_now()
        return ThreadTakeover(previous_run_id=holder, previous=stored.model_copy(deep=True) if stored else None)

    async def release_thread(self, tenant_id: str, thread_id: str, run_id: str) -> None:
        await self._meter.request()
        state = self._threads.get((tenant_id, thread_id))
        if state is None or state.thread.active_run_id != run_id:
            return
        state.thread = state.thread.model_copy(update={"active_run_id": None, "updated_at": utc_now()})
        state.active_run_at = None
        state.listed_last = (state.thread.last_message, state.thread.message_count)

    # ---- messages ------------------------------------------------------------------------------------------

    async def known_message_ids(self, tenant_id: str, thread_id: str, ids: Sequence[str]) -> set[str]:
        unique = list(dict.fromkeys(ids))
        for _ in range(0, len(unique), _IDS_PER_BATCH_GET):
            await self._meter.request()
        state = self._threads.get((tenant_id, thread_id))
        if state is None:
            return set()
        return {mid for mid in unique if mid in state.seq_by_id}

    async def stored_messages(self, tenant_id: str, thread_id: str, ids: Sequence[str]) -> list[Message]:
        unique = list(dict.fromkeys(ids))
        state = self._threads.get((tenant_id, thread_id))
        known = [mid for mid in unique if state is not None and mid in state.seq_by_id]
        for _ in range(0, len(unique), _IDS_PER_BATCH_GET):
            await self._meter.request()  # the id markers
        for _ in range(0, len(known), _IDS_PER_BATCH_GET):
            await self._meter.request()  # the bodies
        if state is None:
            return []
        return [state.messages[state.seq_by_id[mid] - 1].model_copy(deep=True) for mid in known]

    async def append_messages(self, identity: Identity, thread_id: str, messages: Sequence[Message]) -> list[Message]:
        for msg in messages:
            if msg.thread_id != thread_id:
                raise InvalidRequest("message belongs to another thread", code="thread_mismatch")
        stored: list[Message] = []
        pending = list({m.id: m for m in messages}.values())
        for start in range(0, len(pending), _MESSAGES_PER_TRANSACTION):
            chunk = pending[start : start + _MESSAGES_PER_TRANSACTION]
            stored.extend(await self._append_chunk(identity, thread_id, chunk))
        return stored

    async def _append_chunk(
        self, identity: Identity, thread_id: str, chunk: list[Message], *, counter_known: bool = False
    ) -> list[Message]:
        if not counter_known:
            await self._meter.request()  # read the counter
        state = self._owned(identity, thread_id)
        await self._meter.request()  # the transaction
        new = [m for m in chunk if m.id not in state.seq_by_id]
        if len(new) < len(chunk) and new:
            # DynamoDB drops the duplicates from the cancelled transaction and retries: two more requests.
            self._meter.request_count += 2
        return self._store_numbered(state, new)

    @staticmethod
    def _store_numbered(state: ThreadRecord, new: list[Message]) -> list[Message]:
        if not new:
            return []
        base = state.thread.last_seq
        linked = link_messages(new, leaf_id=state.thread.leaf_id, last_seq=base)
        numbered = [capped(m.model_copy(update={"seq": base + i + 1})) for i, m in enumerate(linked)]
        for msg in numbered:
            state.messages.append(msg)
            state.seq_by_id[msg.id] = msg.seq
        # The counter and the leaf: the thread's update time moves when a run releases it (once a turn), as in DynamoDB.
        update: dict[str, object] = {"last_seq": base + len(numbered), "leaf_id": numbered[-1].id}
        if branches_off(new):
            update["branched"] = True
        shown = last_visible(numbered)
        if shown is not None:
            update |= {"last_message": shown[0], "message_count": shown[1]}
        state.thread = state.thread.model_copy(update=update)
        return [m.model_copy(deep=True) for m in numbered]

    async def search_threads(
        self, identity: Identity, criteria: thread_search.ThreadCriteria, *, limit: int, cursor: str | None
    ) -> tuple[list[Thread], str | None]:
        """As the DynamoDB adapter: a walk over the caller's threads in list order, one request per batch, each
        thread as its list entry shows it."""
        partition = partition_of(identity)
        start = thread_search.decode_cursor(cursor, partition, criteria) if cursor else None

        async def fetch(before: str | None, n: int) -> tuple[list[tuple[str, Thread]], bool]:
            everything, _ = await self.list_threads(identity, limit=10**9, cursor=None)
            below = [t for t in everything if before is None or listing_key(t) < before]
            return [(listing_key(t), t) for t in below[:n]], len(below) > n

        threads, position = await thread_search.walk(fetch, criteria, limit=limit, start=start)
        return threads, thread_search.encode_cursor(partition, position) if position else None

    async def set_feedback(
        self, identity: Identity, thread_id: str, message_id: str, feedback: Feedback | None
    ) -> Message:
        """As the DynamoDB adapter (``thread_feedback``): on the message and as the export's entry (``feedback``)."""
        await self._meter.request()
        state = self._owned(identity, thread_id)
        await self._meter.request()
        seq = state.seq_by_id.get(message_id)
        if seq is None:
            raise NotFound("message not found")
        await self._meter.request()
        check_answer(message := state.messages[seq - 1])
        run = await self._ledger.get_run(identity.tenant_id, message.run_id) if feedback and message.run_id else None
        await self._meter.request()
        state = self._owned(identity, thread_id)  # as the transaction's condition: the thread is still there
        state.feedback.pop(message_id, None)
        state.feedback.update({message_id: entry_for(message, feedback, run)} if feedback else {})
        state.messages[seq - 1] = message.model_copy(update={"feedback": feedback})
        return state.messages[seq - 1].model_copy(deep=True)

    async def list_feedback(
        self, tenant_id: str, *, since: datetime, until: datetime, limit: int, after: str | None
    ) -> tuple[list[FeedbackEntry], str | None]:
        """As the DynamoDB adapter: one request, the tenant's entries (``thread_feedback.page_of``)."""
        await self._meter.request()
        tenants = [state.feedback.values() for (tenant, _), state in self._threads.items() if tenant == tenant_id]
        return page_of(tenants, since=since, until=until, limit=limit, after=after)

    async def update_thread(self, identity: Identity, thread_id: str, changes: ThreadChanges) -> Thread:
        """Change the thread's title, metadata, archived or pinned (see ``thread_labels``): a read, an update."""
        await self._meter.request()
        state = self._owned(identity, thread_id)
        changed = apply_changes(state.thread, changes)
        await self._meter.request()
        state.thread = changed
        return changed

    async def set_generated_title(self, identity: Identity, thread_id: str, title: str) -> bool:
        """Write a generated title unless the thread has one or its client set one (``thread_labels``): a read, a
        conditional update."""
        await self._meter.request()
        self._owned(identity, thread_id)
        await self._meter.request()  # the update: its condition is checked as it is written, as DynamoDB's
        state = self._owned(identity, thread_id)
        if not may_generate_title(state.thread):
            return False
        state.thread = state.thread.model_copy(update={"title": title, "title_source": GENERATED_TITLE})
        return True

    async def set_leaf(self, identity: Identity, thread_id: str, leaf_id: str, *, holder: str | None) -> Thread:
        """Make the branch ending at ``leaf_id`` current (see the DynamoDB adapter)."""
        await self._meter.request()  # the message's id marker
        state = self._owned(identity, thread_id)
        if leaf_id not in state.seq_by_id:
            raise NotFound("message not found")
        await self._meter.request()  # the conditional update
        if state.thread.active_run_id != holder:
            raise Conflict("a run is active on this thread; switch branches when it has ended", code="thread_busy")
        state.thread = state.thread.model_copy(update={"leaf_id": leaf_id, "branched": True})
        state.user_digest = None
        return state.thread

    async def admit_messages(
        self,
        identity: Identity,
        thread_id: str,
        messages: Sequence[Message],
        run: Run,
        *,
        last_seq: int,
        last_leaf: str | None = None,
        leaf_after: str | None = None,
        user_digest: str | None = None,
    ) -> AdmittedRun:
        """Append ``messages`` and create ``run`` in one transaction; see the DynamoDB adapter."""
        for msg in messages:
            if msg.thread_id != thread_id:
                raise InvalidRequest("message belongs to another thread", code="thread_mismatch")
        pending = list({m.id: m for m in messages}.values())
        chunks = [pending[i : i + _MESSAGES_PER_TRANSACTION] for i in range(0, len(pending), _MESSAGES_PER_TRANSACTION)]
        stored: list[Message] = []
        for chunk in chunks[:-1]:
            stored += await self._append_chunk(identity, thread_id, chunk, counter_known=chunk is chunks[0])
        await self._meter.request()  # the last transaction carries the run record
        key = (run.tenant_id, run.run_id)
        if key in self._ledger._runs:
            await self._meter.request()
            return AdmittedRun(self._ledger._runs[key].model_copy(deep=True), False, stored)
        state = self._owned(identity, thread_id)
        if chunks:
            if len(chunks) > 1:
                await self._meter.request()  # the counter, re-read after the earlier chunks
            new = [m for m in chunks[-1] if m.id not in state.seq_by_id]
            if len(new) < len(chunks[-1]):
                self._meter.request_count += 2  # a duplicate cancels the transaction: re-read and retry without it
            stored += self._store_numbered(state, new)
        if leaf_after is not None:
            state.thread = state.thread.model_copy(update={"leaf_id": leaf_after, "branched": True})
        if user_digest is not None and (chunks or leaf_after is not None):  # as DynamoDB: with the thread's update
            state.user_digest = user_digest
        self._ledger._runs[key] = run.model_copy(deep=True)
        return AdmittedRun(run, True, stored)

    async def read_back(self, tenant_id: str, thread_id: str, *, before_seq: int | None, limit: int) -> list[Message]:
        await self._meter.request()
        state = self._threads.get((tenant_id, thread_id))
        if state is None or limit <= 0:
            return []
        end = len(state.messages) if before_seq is None else max(0, min(before_seq - 1, len(state.messages)))
        return [m.model_copy(deep=True) for m in reversed(state.messages[max(0, end - limit) : end])]

    async def read_forward(self, tenant_id: str, thread_id: str, *, after_seq: int, limit: int) -> list[Message]:
        await self._meter.request()
        state = self._threads.get((tenant_id, thread_id))
        if state is None or limit <= 0:
            return []
        start = max(0, after_seq)
        return [m.model_copy(deep=True) for m in state.messages[start : start + limit]]

    async def run_message_ids(
        self, tenant_id: str, thread_id: str, run_id: str, *, after_seq: int, scan_limit: int
    ) -> RunMessageIds:
        await self._meter.request()
        state = self._threads.get((tenant_id, thread_id))
        if state is None:
            return RunMessageIds((), complete=True)
        start = max(0, after_seq)
        scanned = state.messages[start : start + scan_limit]
        ids = tuple(m.id for m in scanned if m.run_id == run_id)
        # As a paged read that stops at its bound: a bound reached exactly cannot tell that nothing follows.
        return RunMessageIds(ids, complete=start + scan_limit > len(state.messages))

    # ---- erasure -------------------------------------------------------------------------------------------

    async def delete_thread(self, identity: Identity, thread_id: str, *, holder: str) -> list[str]:
        """Delete the caller's thread held by ``holder``: messages, runs, the thread; audit records are kept."""
        await self._meter.request()
        state = self._owned(identity, thread_id)
        if state.thread.active_run_id != holder:
            raise NotFound("thread not found")
        runs = self._ledger._runs
        run_keys = sorted(k for k, r in runs.items() if k[0] == identity.tenant_id and r.thread_id == thread_id)
        for key in run_keys:
            del self._ledger._runs[key]
        del self._threads[(identity.tenant_id, thread_id)]
        return [run_id for _, run_id in run_keys]
