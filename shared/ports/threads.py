"""The threads-and-messages port: a thread record (owner, counter, active run) and its messages, one partition each.

Fake: ``InMemoryThreads`` (shared/adapters/in_memory/threads.py); adapter: ``DynamoDBThreads``
(shared/adapters/aws/threads.py); contract: tests/contract/test_thread_store_contract.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple, Protocol

from shared.models import Feedback, FeedbackEntry, Identity, Message, Run, Thread, ThreadClaim, ThreadTakeover
from shared.thread_fields import ThreadChanges
from shared.thread_search import ThreadCriteria


@dataclass(frozen=True, slots=True)
class RunMessageIds:
    """The ids of the messages one run stored, in thread order; ``complete`` False when the look-up stopped at its
    bound before the end of the thread (more of them may follow)."""

    ids: tuple[str, ...]
    complete: bool


class MessageHistoryReader(Protocol):
    """Reads a thread backwards, a page at a time (the context window's only read).

    Fake: ``InMemoryThreads``; adapter: ``DynamoDBThreads``; contract: tests/contract/test_thread_store_contract.py."""

    async def read_back(self, tenant_id: str, thread_id: str, *, before_seq: int | None, limit: int) -> list[Message]:
        """Up to ``limit`` messages older than ``before_seq`` (all when None), newest first. One store request."""
        ...


class ConversationStore(MessageHistoryReader, Protocol):
    """Threads and their messages, appended idempotently by message id.

    Fake: ``InMemoryThreads``; adapter: ``DynamoDBThreads``; contract: tests/contract/test_thread_store_contract.py."""

    async def open_thread(self, identity: Identity, thread_id: str) -> Thread:
        """Return the caller's thread, creating it; raises NotFound if it belongs to another user or tenant."""
        ...

    async def get_thread(self, identity: Identity, thread_id: str) -> Thread:
        """The caller's thread; NotFound when absent or not theirs."""
        ...

    async def list_threads(
        self, identity: Identity, *, limit: int, cursor: str | None
    ) -> tuple[list[Thread], str | None]: ...

    async def append_messages(self, identity: Identity, thread_id: str, messages: Sequence[Message]) -> list[Message]:
        """Append in order, idempotent by message id; returns only the messages newly stored, with their seq."""
        ...

    async def known_message_ids(self, tenant_id: str, thread_id: str, ids: Sequence[str]) -> set[str]: ...

    async def stored_messages(self, tenant_id: str, thread_id: str, ids: Sequence[str]) -> list[Message]:
        """The stored messages of ``ids`` the thread has, in no particular order (an unknown id is left out): what
        admission compares a client's older messages with when its digest of them does not match
        (``shared.runs.known_ids``). Two batch reads: the id markers, then the bodies."""
        ...

    async def read_forward(self, tenant_id: str, thread_id: str, *, after_seq: int, limit: int) -> list[Message]:
        """Up to ``limit`` messages with ``seq > after_seq``, oldest first."""
        ...

    async def run_message_ids(
        self, tenant_id: str, thread_id: str, run_id: str, *, after_seq: int, scan_limit: int
    ) -> RunMessageIds:
        """The ids of the messages with ``run_id``, oldest first, among the first ``scan_limit`` messages after
        ``after_seq`` (the run's ``Run.after_seq``: none of its messages is older). The run's own messages and
        those of the runs after it on the thread are read, never the older ones."""
        ...

    async def search_threads(
        self, identity: Identity, criteria: ThreadCriteria, *, limit: int, cursor: str | None
    ) -> tuple[list[Thread], str | None]:
        """The caller's threads matching ``criteria`` in its order (``shared.thread_search``), a page at a time: a
        page may hold fewer than ``limit`` threads (the cost of a call is bounded) and still have a next cursor."""
        ...

    async def set_feedback(
        self, identity: Identity, thread_id: str, message_id: str, feedback: Feedback | None
    ) -> Message:
        """Store (replacing) or remove (None) the caller's feedback on an answer of their thread; the message as
        changed. NotFound for another user's thread or an unknown or hidden message; ``not_an_answer`` (422) for a
        message that is not an assistant's."""
        ...

    async def list_feedback(
        self, tenant_id: str, *, since: datetime, until: datetime, limit: int, after: str | None
    ) -> tuple[list[FeedbackEntry], str | None]:
        """The tenant's feedback given at or after ``since`` and before ``until``, oldest first, at most ``limit``
        entries after the position ``after`` (a position this call returned); the position of the last entry when
        more may follow, else None. Never a scan: one Query of the tenant's feedback, whatever its thread count."""
        ...

    async def update_thread(self, identity: Identity, thread_id: str, changes: ThreadChanges) -> Thread:
        """Apply ``changes`` (title, metadata merge, archived, pinned) to the caller's thread; the thread as changed.
        NotFound when it is absent or not theirs; InvalidRequest when the merged metadata is over its bounds."""
        ...

    async def set_generated_title(self, identity: Identity, thread_id: str, title: str) -> bool:
        """Write a generated title (``title_source`` ``generated``) on the caller's thread, on the condition that it
        has no title and its client never set or removed one (``thread_fields.may_generate_title``), checked by the
        write itself so a ``PATCH`` made meanwhile wins. True when written, False when that condition failed;
        NotFound when the thread is absent or not theirs. Metadata, flags and the preview are left as they are."""
        ...

    async def set_leaf(self, identity: Identity, thread_id: str, leaf_id: str, *, holder: str | None) -> Thread:
        """Make the branch that ends at ``leaf_id`` the thread's current one. ``holder``: the run that holds the
        thread (None: no run may hold it, else ``Conflict`` ``thread_busy``); NotFound for an unknown message or
        someone else's thread."""
        ...


class AdmittedRun(NamedTuple):
    """What ``admit_messages`` did: the run (the stored one when it existed already), whether this call created it,
    and the messages it stored, numbered and exactly as a read returns them (content capped), oldest first."""

    run: Run
    created: bool
    messages: list[Message]


class ThreadStore(ConversationStore, Protocol):
    """The whole threads-and-messages aggregate: the conversation store plus the thread's claim by one run at a
    time, the admission write and the thread's deletion.

    Fake: ``InMemoryThreads``; adapter: ``DynamoDBThreads``; contract: tests/contract/test_thread_store_contract.py.
    The admission write and the takeover also touch a run record: the adapter is given the run ledger's adapter of
    the same table for that (a run is created in the same transaction as the messages that start it)."""

    async def claim_thread(
        self, identity: Identity, thread_id: str, run_id: str, *, stale_before: datetime
    ) -> bool: ...

    async def open_and_claim(
        self, identity: Identity, thread_id: str, run_id: str, *, stale_before: datetime
    ) -> ThreadClaim | None: ...

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
        """``last_seq`` and ``last_leaf``: the counter and the leaf as the caller last saw them (the claim's), so the
        first attempt reads nothing; ``leaf_after``: the thread's current leaf once admitted (a regenerate's
        question), else the last message stored (or the leaf as it was); ``user_digest``: kept on the thread with
        the messages (the next claim returns it; None: left as it is)."""
        ...


    async def forget_thread(self, identity: Identity, thread_id: str, run_id: str) -> None: ...

    async def take_over_thread(
        self, identity: Identity, thread_id: str, run_id: str, *, lease_expired_before: datetime
    ) -> ThreadTakeover | None: ...

    async def release_thread(self, tenant_id: str, thread_id: str, run_id: str) -> None: ...

    async def delete_thread(self, identity: Identity, thread_id: str, *, holder: str) -> list[str]: ...
