"""DynamoDB adapter of the threads-and-messages aggregate (``shared.ports.threads``): one partition per thread.

The thread item (``THREAD#<tenant>#<thread>`` / ``META``) holds the owner, the message counter and the run that holds
the thread (its claim); the messages and their id markers share its partition (keys in ``dynamo_codec``). Appends
are in ``thread_appends``, reads of messages in ``message_reads``. A run's record belongs to the run ledger: the
takeover reads its lease there, the admission creates it in the messages' transaction, and a thread's deletion
removes its runs with it.
"""

from __future__ import annotations

import asyncio
import functools
import random
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from shared.adapters.aws import dynamo_codec as codec
from shared.adapters.aws import message_reads
from shared.adapters.aws.runs import DynamoDBRunLedger
from shared.adapters.aws.thread_appends import MessageAppends
from shared.adapters.aws.thread_branches import set_leaf
from shared.adapters.aws.thread_feedback import list_feedback, set_feedback
from shared.adapters.aws.thread_labels import GeneratedTitles, update_thread
from shared.adapters.aws.thread_list import ThreadList
from shared.errors import Conflict, NotFound
from shared.migrations.model import SCHEMA_VERSION
from shared.migrations.registry import current_version
from shared.models import Feedback, Identity, Message, Run, Thread, ThreadClaim, ThreadTakeover, utc_now
from shared.ports.threads import AdmittedRun, RunMessageIds
from shared.thread_fields import ThreadChanges
from shared.thread_search import ThreadCriteria

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

_MAX_DELETE_ATTEMPTS = 8
THREAD_VERSION = current_version("thread")
"""The thread item's schema version this code writes (2: in ``GSI3``, not ``GSI1``; 3: with its list preview)."""
_OPEN_AND_CLAIM = (
    "SET active_run_id = :r, active_run_at = :now, #k = if_not_exists(#k, :kind), "
    "tenant_id = if_not_exists(tenant_id, :t), thread_id = if_not_exists(thread_id, :tid), "
    "owner_user_id = if_not_exists(owner_user_id, :u), "
    "created_at = if_not_exists(created_at, :now), updated_at = if_not_exists(updated_at, :now), "
    "last_seq = if_not_exists(last_seq, :zero), GSI3PK = :g3, "
    "GSI3SK = if_not_exists(GSI3SK, :g3s), #v = :v REMOVE GSI1PK, GSI1SK"
)
"""``open_and_claim``'s update: the thread created when new, claimed, and moved out of ``GSI1`` when it is of
the release before (migration 2's change, made by the first run that touches it)."""


class DynamoDBThreads(GeneratedTitles):
    """Threads and their messages; ``runs`` is the run ledger of the same table (admission, takeover, deletion);
    ``list_complete`` whether migration 2 has completed (``thread_list``; None: the table never held the old shape)."""

    def __init__(
        self,
        table_name: str,
        client_factory: Callable[[], DynamoDBClient],
        *,
        runs: DynamoDBRunLedger,
        list_complete: Callable[[], Awaitable[bool]] | None = None,
    ) -> None:
        super().__init__(table_name, client_factory)
        self._runs = runs
        self._appends = MessageAppends(self, self.get_thread, runs)
        self._list = ThreadList(self, list_complete)

    # ---- threads -------------------------------------------------------------------------------------------

    async def open_thread(self, identity: Identity, thread_id: str) -> Thread:
        now = utc_now().isoformat()
        item = codec.to_item(
            {
                "PK": codec.thread_pk(identity.tenant_id, thread_id),
                "SK": codec.META,
                "kind": "thread",
                "tenant_id": identity.tenant_id,
                "thread_id": thread_id,
                "owner_user_id": identity.user_id,
                "created_at": now,
                "updated_at": now,
                "last_seq": 0,
                "GSI3PK": codec.user_threads_gsi(identity.tenant_id, identity.user_id),
                "GSI3SK": f"{now}#{thread_id}",
                SCHEMA_VERSION: THREAD_VERSION,
            }
        )
        try:
            await self._call(
                lambda: self.client.put_item(
                    TableName=self._table, Item=item, ConditionExpression="attribute_not_exists(PK)"
                )
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            return await self.get_thread(identity, thread_id)
        return codec.thread_from_item(item)

    async def _thread_item(self, tenant_id: str, thread_id: str) -> dict[str, Any] | None:
        resp = await self._call(
            lambda: self.client.get_item(
                TableName=self._table,
                Key=codec.to_item({"PK": codec.thread_pk(tenant_id, thread_id), "SK": codec.META}),
                ConsistentRead=True,
            )
        )
        item: dict[str, Any] | None = resp.get("Item")
        return item

    async def get_thread(self, identity: Identity, thread_id: str) -> Thread:
        item = await self._thread_item(identity.tenant_id, thread_id)
        if item is None:
            raise NotFound("thread not found")
        thread = codec.thread_from_item(item)
        if thread.owner_user_id != identity.user_id:
            raise NotFound("thread not found")
        return thread

    async def list_threads(
        self, identity: Identity, *, limit: int, cursor: str | None
    ) -> tuple[list[Thread], str | None]:
        """The caller's threads, most recently updated first (``thread_list``: one Query of the thread-list index).
        A listed thread carries what the index projects: its ``last_seq`` and ``active_run_id`` are not read."""
        return await self._list.list_threads(identity, limit=limit, cursor=cursor)

    async def claim_thread(self, identity: Identity, thread_id: str, run_id: str, *, stale_before: datetime) -> bool:
        """Mark ``run_id`` as the thread's active run; False when another live run holds it."""
        try:
            await self._call(
                lambda: self.client.update_item(
                    TableName=self._table,
                    Key=codec.to_item({"PK": codec.thread_pk(identity.tenant_id, thread_id), "SK": codec.META}),
                    UpdateExpression="SET active_run_id = :r, active_run_at = :now",
                    ConditionExpression=(
                        "owner_user_id = :u AND (attribute_not_exists(active_run_id) OR active_run_id = :r "
                        "OR active_run_at < :stale)"
                    ),
                    ExpressionAttributeValues=codec.to_item(
                        {
                            ":r": run_id,
                            ":u": identity.user_id,
                            ":now": utc_now().isoformat(),
                            ":stale": stale_before.isoformat(),
                        }
                    ),
                )
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ConditionalCheckFailedException":
                return False
            raise
        return True

    async def open_and_claim(
        self, identity: Identity, thread_id: str, run_id: str, *, stale_before: datetime
    ) -> ThreadClaim | None:
        """Open the thread (creating it for the caller when new) and claim it for ``run_id``, in one conditional
        UpdateItem that returns the counter: what admission needs of the thread before it appends.

        None when another live run holds the thread (the caller may try ``take_over_thread``); NotFound when the
        thread is someone else's. ``newly_claimed`` is False when ``run_id`` already held it (a retry).

        A thread item of the release before (in ``GSI1``) is moved to the thread-list index on the way, as
        migration 2 would move it (``shared.migrations.thread_list_index``); an item in the new shape is unchanged
        by the ``SET``s of its index keys, so the claim writes no index entry.
        """
        now = utc_now().isoformat()
        key = codec.to_item({"PK": codec.thread_pk(identity.tenant_id, thread_id), "SK": codec.META})
        try:
            resp = await self._call(
                lambda: self.client.update_item(
                    TableName=self._table,
                    Key=key,
                    UpdateExpression=_OPEN_AND_CLAIM,
                    ConditionExpression=(
                        "(attribute_not_exists(PK) OR owner_user_id = :u) AND (attribute_not_exists(active_run_id) "
                        "OR active_run_id = :r OR active_run_at < :stale)"
                    ),
                    ExpressionAttributeNames={"#k": "kind", "#v": SCHEMA_VERSION},
                    ExpressionAttributeValues=codec.to_item(
                        {
                            ":r": run_id,
                            ":now": now,
                            ":kind": "thread",
                            ":t": identity.tenant_id,
                            ":tid": thread_id,
                            ":u": identity.user_id,
                            ":zero": 0,
                            ":g3": codec.user_threads_gsi(identity.tenant_id, identity.user_id),
                            ":g3s": f"{now}#{thread_id}",
                            ":v": THREAD_VERSION,
                            ":stale": stale_before.isoformat(),
                        }
                    ),
                    ReturnValues="ALL_OLD",
                )
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            await self.get_thread(identity, thread_id)  # NotFound for someone else's thread
            return None
        old = codec.from_item(resp.get("Attributes") or {})
        return ThreadClaim(
            last_seq=int(old.get("last_seq", 0)),
            newly_claimed=old.get("active_run_id") != run_id,
            created=not old,
            leaf_id=old.get("leaf_id"),
            user_digest=old.get("user_digest"),
        )

    async def forget_thread(self, identity: Identity, thread_id: str, run_id: str) -> None:
        """Delete a thread an admission created and then refused (still empty and held by ``run_id``), so a
        refused request leaves nothing behind; anything else about the thread keeps it."""
        try:
            await self._call(
                lambda: self.client.delete_item(
                    TableName=self._table,
                    Key=codec.to_item({"PK": codec.thread_pk(identity.tenant_id, thread_id), "SK": codec.META}),
                    ConditionExpression="owner_user_id = :u AND active_run_id = :r AND last_seq = :zero",
                    ExpressionAttributeValues=codec.to_item({":u": identity.user_id, ":r": run_id, ":zero": 0}),
                )
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise

    async def take_over_thread(
        self, identity: Identity, thread_id: str, run_id: str, *, lease_expired_before: datetime
    ) -> ThreadTakeover | None:
        """Give the thread to ``run_id`` if its holder's lease expired; None while the holder is alive.

        The holder's lease is its run's ``heartbeat_at`` (renewed by the run's heartbeat), or, before its admission
        stored a run record, the claim's own time. A holder that already ended (its release was lost) has no lease.
        The hand-over is conditional on the holder, so of two runs taking over the same thread exactly one wins.
        Only called after ``claim_thread`` was refused, so a free thread costs nothing here.
        """
        key = codec.to_item({"PK": codec.thread_pk(identity.tenant_id, thread_id), "SK": codec.META})
        resp = await self._call(lambda: self.client.get_item(TableName=self._table, Key=key, ConsistentRead=True))
        item = resp.get("Item")
        if item is None:
            return None
        data = codec.from_item(item)
        holder = data.get("active_run_id")
        if data.get("owner_user_id") != identity.user_id or not holder or holder == run_id:
            return None
        previous = await self._runs.get_run(identity.tenant_id, holder)
        if previous is None:
            claimed_at = data.get("active_run_at")
            expired = claimed_at is None or datetime.fromisoformat(claimed_at) < lease_expired_before
        else:
            expired = previous.status.is_terminal or previous.heartbeat_at < lease_expired_before
        if not expired:
            return None
        try:
            await self._call(
                lambda: self.client.update_item(
                    TableName=self._table,
                    Key=key,
                    UpdateExpression="SET active_run_id = :r, active_run_at = :now",
                    ConditionExpression="owner_user_id = :u AND active_run_id = :old",
                    ExpressionAttributeValues=codec.to_item(
                        {":r": run_id, ":u": identity.user_id, ":old": holder, ":now": utc_now().isoformat()}
                    ),
                )
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ConditionalCheckFailedException":
                return None
            raise
        return ThreadTakeover(previous_run_id=holder, previous=previous)

    async def release_thread(self, tenant_id: str, thread_id: str, run_id: str) -> None:
        """Give the thread back; the run's end is the thread's update: its one move in the thread list a turn, which
        also carries the turn's last visible message (``pending_last``) into the list's projected ``last_message``."""
        now = utc_now().isoformat()
        try:
            await self._call(
                lambda: self.client.update_item(
                    TableName=self._table,
                    Key=codec.to_item({"PK": codec.thread_pk(tenant_id, thread_id), "SK": codec.META}),
                    UpdateExpression=(
                        "REMOVE active_run_id, active_run_at SET updated_at = :now, GSI3SK = :g,"
                        " last_message = if_not_exists(pending_last, :none)"
                    ),
                    ConditionExpression="active_run_id = :r",
                    ExpressionAttributeValues=codec.to_item(
                        {":r": run_id, ":now": now, ":g": f"{now}#{thread_id}", ":none": {}}
                    ),
                )
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise

    # ---- messages ------------------------------------------------------------------------------------------

    async def known_message_ids(self, tenant_id: str, thread_id: str, ids: Sequence[str]) -> set[str]:
        return await message_reads.known_message_ids(self, tenant_id, thread_id, ids)

    async def stored_messages(self, tenant_id: str, thread_id: str, ids: Sequence[str]) -> list[Message]:
        return await message_reads.stored_messages(self, tenant_id, thread_id, ids)

    async def read_back(self, tenant_id: str, thread_id: str, *, before_seq: int | None, limit: int) -> list[Message]:
        return await message_reads.read_back(self, tenant_id, thread_id, before_seq=before_seq, limit=limit)

    async def read_forward(self, tenant_id: str, thread_id: str, *, after_seq: int, limit: int) -> list[Message]:
        return await message_reads.read_forward(self, tenant_id, thread_id, after_seq=after_seq, limit=limit)

    async def run_message_ids(
        self, tenant_id: str, thread_id: str, run_id: str, *, after_seq: int, scan_limit: int
    ) -> RunMessageIds:
        return await message_reads.run_message_ids(
            self, tenant_id, thread_id, run_id, after_seq=after_seq, scan_limit=scan_limit
        )

    # ---- erasure -------------------------------------------------------------------------------------------

    async def delete_thread(self, identity: Identity, thread_id: str, *, holder: str) -> list[str]:
        """Delete a thread the caller owns and holds with ``holder`` (the erasure's claim, so no run is admitted
        meanwhile): every item of its partition (messages and pending tool calls, message-id markers, the memory
        cursor and pending-extraction marker), its run records, and the thread item last, so a deletion cut short
        can be repeated. Audit records (their own partition, with their own TTL) are kept. Returns the deleted
        runs' ids (their event streams are the caller's to delete).

        Raises:
            NotFound: the thread is not the caller's, or ``holder`` does not hold it.
        """
        pk = codec.thread_pk(identity.tenant_id, thread_id)
        if (await self.get_thread(identity, thread_id)).active_run_id != holder:
            raise NotFound("thread not found")
        items = await self._query_all({"KeyConditionExpression": "PK = :pk"}, pk)
        runs = await self._query_all({"IndexName": "GSI1", "KeyConditionExpression": "GSI1PK = :pk"}, f"{pk}#RUNS")
        keys = [{"PK": i["PK"], "SK": i["SK"]} for i in items if i["SK"] != {"S": codec.META}]
        keys += [{"PK": r["PK"], "SK": r["SK"]} for r in runs]
        await self._batch_delete(keys)
        try:
            await self._call(
                lambda: self.client.delete_item(
                    TableName=self._table,
                    Key=codec.to_item({"PK": pk, "SK": codec.META}),
                    ConditionExpression="owner_user_id = :u AND active_run_id = :r",
                    ExpressionAttributeValues=codec.to_item({":u": identity.user_id, ":r": holder}),
                )
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ConditionalCheckFailedException":
                raise NotFound("thread not found") from exc
            raise
        return [codec.run_from_item(r).run_id for r in runs]

    async def _query_all(self, query: dict[str, Any], pk: str) -> list[dict[str, Any]]:
        """Every item of one partition (of the table or an index), page by page."""
        items: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "ExpressionAttributeValues": codec.to_item({":pk": pk}),
            **query,
        }
        while True:
            resp = await self._call(lambda: self.client.query(**kwargs))
            items += resp.get("Items", [])
            if "LastEvaluatedKey" not in resp:
                return items
            kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]

    async def _batch_delete(self, keys: list[dict[str, Any]]) -> None:
        """``BatchWriteItem`` deletes, 25 keys a request; unprocessed keys are sent again after a growing pause."""
        for start in range(0, len(keys), 25):
            pending: list[Any] = [{"DeleteRequest": {"Key": k}} for k in keys[start : start + 25]]
            for attempt in range(_MAX_DELETE_ATTEMPTS):
                resp = await self._call(
                    functools.partial(self.client.batch_write_item, RequestItems={self._table: pending})
                )
                pending = list(resp.get("UnprocessedItems", {}).get(self._table, []))
                if not pending:
                    break
                await asyncio.sleep(min(1.0, 0.05 * 2**attempt) * random.random())
            else:
                raise Conflict("the thread could not be deleted completely; try again", code="concurrent_write")

    async def append_messages(self, identity: Identity, thread_id: str, messages: Sequence[Message]) -> list[Message]:
        return await self._appends.append_messages(identity, thread_id, messages)

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
        """Append ``messages`` and create ``run`` in the same transaction (``MessageAppends.admit_messages``)."""
        return await self._appends.admit_messages(
            identity,
            thread_id,
            messages,
            run,
            last_seq=last_seq,
            last_leaf=last_leaf,
            leaf_after=leaf_after,
            user_digest=user_digest,
        )

    async def search_threads(
        self, identity: Identity, criteria: ThreadCriteria, *, limit: int, cursor: str | None
    ) -> tuple[list[Thread], str | None]:
        return await self._list.search_threads(identity, criteria, limit=limit, cursor=cursor)  # ``thread_list``

    async def update_thread(self, identity: Identity, thread_id: str, changes: ThreadChanges) -> Thread:
        """Change the caller's thread's title, metadata, archived or pinned (``thread_labels.update_thread``)."""
        return await update_thread(self, await self.get_thread(identity, thread_id), identity, changes)

    async def set_feedback(self, identity: Identity, thread_id: str, message_id: str, fb: Feedback | None) -> Message:
        return await set_feedback(self, self._runs, self.get_thread, identity, thread_id, message_id, fb)

    list_feedback = list_feedback  # the tenant's feedback of a time range: one Query of GSI1 (``thread_feedback``)

    async def set_leaf(self, identity: Identity, thread_id: str, leaf_id: str, *, holder: str | None) -> Thread:
        """Make the branch ending at ``leaf_id`` current (``thread_branches.set_leaf``)."""
        return await set_leaf(self, identity, thread_id, leaf_id, holder=holder)
