"""The message appends of the threads adapter: numbered by the thread's counter, idempotent by message id, and,
for an admission, written in the same transaction as the run they start.

Each append is one transaction per 40 messages: the counter update conditioned on its value, an id marker and the
body per message (the marker's absence is the idempotency check), and for an admission the run item conditioned on
its absence. A cancelled transaction says why per item, so a duplicate is dropped and a concurrent writer retried.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from shared.adapters.aws import dynamo_codec as codec
from shared.adapters.aws.runs import DynamoDBRunLedger, RunExists
from shared.adapters.aws.table_adapter import TableAdapter
from shared.errors import Conflict, InvalidRequest
from shared.message_tree import branches_off, link_messages
from shared.models import Identity, Message, Run, Thread
from shared.ports.threads import AdmittedRun
from shared.thread_fields import last_visible

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

_MESSAGES_PER_TRANSACTION = 40
_MAX_APPEND_ATTEMPTS = 12


class MessageAppends:
    """Appends messages through ``threads`` (the threads adapter: its client, table and request count), reading a
    thread with ``get_thread`` when its counter moved, and creating runs in ``runs`` for an admission."""

    def __init__(
        self, threads: TableAdapter, get_thread: Callable[[Identity, str], Awaitable[Thread]], runs: DynamoDBRunLedger
    ) -> None:
        self._threads = threads
        self._get_thread = get_thread
        self._runs = runs
        self._table = threads._table
        self._call = threads._call  # its requests count as the threads adapter's

    @property
    def client(self) -> DynamoDBClient:
        return self._threads.client

    async def append_messages(self, identity: Identity, thread_id: str, messages: Sequence[Message]) -> list[Message]:
        stored: list[Message] = []
        if any(m.thread_id != thread_id for m in messages):
            raise InvalidRequest("a message belongs to another thread", code="thread_mismatch")
        pending = list({m.id: m for m in messages}.values())
        for start in range(0, len(pending), _MESSAGES_PER_TRANSACTION):
            stored.extend(
                await self._append_chunk(identity, thread_id, pending[start : start + _MESSAGES_PER_TRANSACTION])
            )
        return stored

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
        """Append ``messages`` and create ``run`` in the same transaction (the last one, beyond 40 messages).

        ``last_seq`` and ``last_leaf`` are the counter and the current leaf as the caller last saw them
        (``open_and_claim`` returns them), so the first attempt reads nothing; ``leaf_after`` (a regenerate's
        question) becomes the current leaf in the same transaction, and ``user_digest`` (when given) is kept on the
        thread item in it. A run that exists already cancels the
        transaction: nothing is stored, and the
        stored run comes back with ``False`` (the caller attaches to it or refuses a conflicting body).
        """
        if any(m.thread_id != thread_id for m in messages):
            raise InvalidRequest("a message belongs to another thread", code="thread_mismatch")
        pending = list({m.id: m for m in messages}.values())
        chunks = [pending[i : i + _MESSAGES_PER_TRANSACTION] for i in range(0, len(pending), _MESSAGES_PER_TRANSACTION)]
        run_item = self._runs.run_item(run)
        base: tuple[int, str | None] | None = (last_seq, last_leaf)
        stored: list[Message] = []
        for chunk in chunks[:-1]:
            stored += await self._append_chunk(identity, thread_id, chunk, base=base)
            base = None
        try:
            last = chunks[-1] if chunks else []
            stored += await self._append_chunk(
                identity,
                thread_id,
                last,
                base=base,
                run_item=run_item,
                leaf_after=leaf_after,
                user_digest=user_digest,
            )
        except RunExists:
            existing = await self._runs.get_run(run.tenant_id, run.run_id)
            if existing is None:  # pragma: no cover - deleted between the two calls
                raise
            return AdmittedRun(existing, False, stored)
        return AdmittedRun(run, True, stored)

    async def _append_chunk(
        self,
        identity: Identity,
        thread_id: str,
        chunk: list[Message],
        *,
        base: tuple[int, str | None] | None = None,
        run_item: dict[str, Any] | None = None,
        leaf_after: str | None = None,
        user_digest: str | None = None,
    ) -> list[Message]:
        """One transaction: counter and leaf update (conditioned on their values), an id marker and the body per
        message, and ``run_item`` when given (conditioned on its absence: ``RunExists`` when it is there).

        A cancelled transaction says why per item: a failed id marker is a duplicate (dropped and retried without
        it); a failed counter is a concurrent writer or a branch switch (re-read and retried). ``base`` is the
        counter and the leaf as the caller knows them, which saves the read on the first attempt. The messages are
        linked to the leaf (``shared.message_tree.link_messages``) and the last becomes the leaf, or ``leaf_after``.
        """
        for attempt in range(_MAX_APPEND_ATTEMPTS):
            if attempt:
                # Jittered, growing pause: two writers retrying in lock-step would collide forever.
                await asyncio.sleep(random.uniform(0, 0.005 * 2**attempt))
            if not chunk and leaf_after is None:
                if run_item is not None:
                    await self._runs.put_run_item(run_item)
                return []
            if base is None or attempt:
                thread = await self._get_thread(identity, thread_id)
                base = (thread.last_seq, thread.leaf_id)
            last_seq, leaf = base
            linked = link_messages(chunk, leaf_id=leaf, last_seq=last_seq)
            numbered = [m.model_copy(update={"seq": last_seq + i + 1}) for i, m in enumerate(linked)]
            new_leaf = leaf_after or (numbered[-1].id if numbered else leaf)
            branched = leaf_after is not None or branches_off(chunk)
            items = self._append_items(
                identity,
                thread_id,
                numbered,
                base=base,
                run_item=run_item,
                leaf=(new_leaf, branched),
                user_digest=user_digest,
            )
            try:
                await self._call(lambda items=items: self.client.transact_write_items(TransactItems=items))  # type: ignore[misc]
            except ClientError as exc:
                if exc.response["Error"]["Code"] != "TransactionCanceledException":
                    raise
                run_item_at = len(items) - 1 if run_item is not None else None
                duplicates = _cancelled_duplicates(exc, numbered, run_item_at=run_item_at)
                chunk = [m for m in chunk if m.id not in duplicates]
                continue  # a concurrent writer moved the counter (or we dropped duplicates): retry
            return [codec.as_stored(m) for m in numbered]
        raise Conflict("could not append messages: too many concurrent writers", code="concurrent_write")

    def _append_items(
        self,
        identity: Identity,
        thread_id: str,
        numbered: list[Message],
        *,
        base: tuple[int, str | None],
        run_item: dict[str, Any] | None,
        leaf: tuple[str | None, bool],
        user_digest: str | None = None,
    ) -> list[dict[str, Any]]:
        """The items of one append transaction, in the order :func:`_cancelled_duplicates` reads them back: the
        counter update (with the new leaf, and ``branched`` when it branches off), then the id marker and the body
        of each message, then ``run_item`` when given."""
        pk = codec.thread_pk(identity.tenant_id, thread_id)
        # The counter and the leaf: the thread's update time (and its place in the thread list) moves once a turn,
        # when the run releases the thread (``DynamoDBThreads.release_thread``), so an append writes no index entry.
        last_seq, old_leaf = base
        new_leaf, branched = leaf
        values: dict[str, Any] = {":new": last_seq + len(numbered), ":old": last_seq, ":u": identity.user_id}
        update = "SET last_seq = :new"
        if new_leaf is not None:
            update += ", leaf_id = :leaf"
            values[":leaf"] = new_leaf
        if branched:
            update += ", branched = :true"
            values[":true"] = True
        if user_digest is not None:
            update += ", user_digest = :ud"
            values[":ud"] = user_digest
        shown = last_visible(numbered)
        if shown is not None:  # the list's preview: copied to the projected ``last_message`` at release
            update += ", pending_last = :last"
            values[":last"] = codec.last_message_value(*shown)
        same_leaf = "attribute_not_exists(leaf_id)"
        if old_leaf is not None:
            same_leaf = "leaf_id = :oldleaf"
            values[":oldleaf"] = old_leaf
        items: list[dict[str, Any]] = [
            {
                "Update": {
                    "TableName": self._table,
                    "Key": codec.to_item({"PK": pk, "SK": codec.META}),
                    "UpdateExpression": update,
                    "ConditionExpression": f"owner_user_id = :u AND last_seq = :old AND {same_leaf}",
                    "ExpressionAttributeValues": codec.to_item(values),
                }
            }
        ]
        for msg in numbered:
            marker = {"PK": pk, "SK": codec.msg_id_sk(msg.id), "kind": "message_id", "seq": msg.seq}
            items.append(self._put_new(codec.to_item(marker)))
            items.append({"Put": {"TableName": self._table, "Item": codec.message_to_item(identity.tenant_id, msg)}})
        if run_item is not None:
            items.append(self._put_new(run_item))
        return items

    def _put_new(self, item: dict[str, Any]) -> dict[str, Any]:
        """A transaction ``Put`` of an item that must not exist yet."""
        return {"Put": {"TableName": self._table, "Item": item, "ConditionExpression": "attribute_not_exists(PK)"}}


def _cancelled_duplicates(exc: ClientError, numbered: list[Message], *, run_item_at: int | None) -> set[str]:
    """The ids of the messages a cancelled append transaction found stored already (their id marker's condition
    failed); ``RunExists`` when the run item at ``run_item_at`` was the one there already."""
    reasons = exc.response.get("CancellationReasons", [])
    failed = [i for i, reason in enumerate(reasons) if reason.get("Code") == "ConditionalCheckFailed"]
    if run_item_at is not None and run_item_at in failed:
        raise RunExists from exc
    # Item 0 is the counter; message k has its id marker at 1 + 2k and its body at 2 + 2k.
    return {numbered[(i - 1) // 2].id for i in failed if 0 < i < 1 + 2 * len(numbered) and i % 2}
