"""DynamoDB adapter for the conversation store, the run ledger and the audit log (one table).

boto3 is synchronous; every call runs in a worker thread so the event loop keeps streaming. The client is created
lazily on first use so that moto can patch before it exists and cold starts stay cheap.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import hashlib
import json
import random
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from shared.adapters.aws import dynamo_codec as codec
from shared.adapters.aws.table_adapter import TableAdapter
from shared.errors import Conflict, InvalidRequest, NotFound
from shared.models import (
    AuditRecord,
    Identity,
    Message,
    Run,
    RunStatus,
    Thread,
    ThreadClaim,
    ThreadTakeover,
    Usage,
    utc_now,
)
from shared.ports.store import AdmittedRun

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


# One transaction holds at most 100 items; each message takes two (id marker and body) plus the counter update.
_MESSAGES_PER_TRANSACTION = 40
_MAX_APPEND_ATTEMPTS = 12
_MAX_DELETE_ATTEMPTS = 8

# Running runs are indexed in GSI2, a sparse KEYS_ONLY index written at creation and removed when the run ends, so the
# sweeper reads only the runs that are still running. Its partition is spread over a few shards so that run creation
# never makes one index partition hot.
RUNNING_SHARDS = 8
_RUNNING_INDEX = "GSI2"


class _RunExists(Exception):
    """The run record is there already (a retry, or another request with the same run id)."""


def running_gsi(run_pk: str) -> str:
    """The GSI2 partition of a running run: ``RUNNING#<shard>``, the shard a stable hash of the run's key."""
    shard = int(hashlib.sha256(run_pk.encode()).hexdigest()[:8], 16) % RUNNING_SHARDS
    return f"RUNNING#{shard}"


@dataclass(frozen=True)
class Retention:
    """How long run and audit records live (the table's TTL, ``expires_at``; docs/storage.md "Retention").

    Threads, messages, memories and tasks carry no TTL: they are the user's data and live until deleted.
    """

    run: timedelta = timedelta(days=90)
    audit: timedelta = timedelta(days=400)


class DynamoDBStore(TableAdapter):
    """Threads, messages, runs and audit records in one table (keys in ``dynamo_codec``)."""

    def __init__(
        self,
        table_name: str,
        client_factory: Callable[[], DynamoDBClient],
        *,
        retention: Retention | None = None,
    ) -> None:
        super().__init__(table_name, client_factory)
        self.retention = retention or Retention()

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
                "GSI1PK": codec.user_threads_gsi(identity.tenant_id, identity.user_id),
                "GSI1SK": f"{now}#{thread_id}",
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
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "IndexName": "GSI1",
            "KeyConditionExpression": "GSI1PK = :pk",
            "ExpressionAttributeValues": codec.to_item(
                {":pk": codec.user_threads_gsi(identity.tenant_id, identity.user_id)}
            ),
            "ScanIndexForward": False,
            "Limit": limit,
        }
        if cursor:
            start = _decode_cursor(cursor)
            # A cursor is opaque but client-held: exactly the index's key attributes, as strings, and in the
            # caller's own partition; anything else is refused before DynamoDB sees it.
            expected = codec.to_item({"k": codec.user_threads_gsi(identity.tenant_id, identity.user_id)})["k"]
            shape_ok = set(start) == {"PK", "SK", "GSI1PK", "GSI1SK"} and all(
                isinstance(v, dict) and set(v) == {"S"} and isinstance(v["S"], str) for v in start.values()
            )
            if not shape_ok or start.get("GSI1PK") != expected:
                raise InvalidRequest("malformed cursor", code="invalid_cursor")
            kwargs["ExclusiveStartKey"] = start
        resp = await self._call(lambda: self.client.query(**kwargs))
        threads = [codec.thread_from_item(i) for i in resp.get("Items", [])]
        last = resp.get("LastEvaluatedKey")
        return threads, _encode_cursor(last) if last else None

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
        """
        now = utc_now().isoformat()
        key = codec.to_item({"PK": codec.thread_pk(identity.tenant_id, thread_id), "SK": codec.META})
        try:
            resp = await self._call(
                lambda: self.client.update_item(
                    TableName=self._table,
                    Key=key,
                    UpdateExpression=(
                        "SET active_run_id = :r, active_run_at = :now, #k = if_not_exists(#k, :kind), "
                        "tenant_id = if_not_exists(tenant_id, :t), thread_id = if_not_exists(thread_id, :tid), "
                        "owner_user_id = if_not_exists(owner_user_id, :u), "
                        "created_at = if_not_exists(created_at, :now), updated_at = if_not_exists(updated_at, :now), "
                        "last_seq = if_not_exists(last_seq, :zero), GSI1PK = if_not_exists(GSI1PK, :g1), "
                        "GSI1SK = if_not_exists(GSI1SK, :g1s)"
                    ),
                    ConditionExpression=(
                        "(attribute_not_exists(PK) OR owner_user_id = :u) AND (attribute_not_exists(active_run_id) "
                        "OR active_run_id = :r OR active_run_at < :stale)"
                    ),
                    ExpressionAttributeNames={"#k": "kind"},
                    ExpressionAttributeValues=codec.to_item(
                        {
                            ":r": run_id,
                            ":now": now,
                            ":kind": "thread",
                            ":t": identity.tenant_id,
                            ":tid": thread_id,
                            ":u": identity.user_id,
                            ":zero": 0,
                            ":g1": codec.user_threads_gsi(identity.tenant_id, identity.user_id),
                            ":g1s": f"{now}#{thread_id}",
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
        previous = await self.get_run(identity.tenant_id, holder)
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
        now = utc_now().isoformat()
        try:
            await self._call(
                lambda: self.client.update_item(
                    TableName=self._table,
                    Key=codec.to_item({"PK": codec.thread_pk(tenant_id, thread_id), "SK": codec.META}),
                    UpdateExpression="REMOVE active_run_id, active_run_at SET updated_at = :now, GSI1SK = :g",
                    ConditionExpression="active_run_id = :r",
                    ExpressionAttributeValues=codec.to_item({":r": run_id, ":now": now, ":g": f"{now}#{thread_id}"}),
                )
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise

    # ---- messages ------------------------------------------------------------------------------------------

    async def known_message_ids(self, tenant_id: str, thread_id: str, ids: Sequence[str]) -> set[str]:
        unique = list(dict.fromkeys(ids))
        known: set[str] = set()
        pk = codec.thread_pk(tenant_id, thread_id)
        for start in range(0, len(unique), 100):
            chunk = unique[start : start + 100]
            keys = [codec.to_item({"PK": pk, "SK": codec.msg_id_sk(mid)}) for mid in chunk]
            request: dict[str, Any] = {self._table: {"Keys": keys, "ConsistentRead": True}}
            while request:
                resp = await self._call(lambda req=request: self.client.batch_get_item(RequestItems=req))  # type: ignore[misc]
                for item in resp.get("Responses", {}).get(self._table, []):
                    known.add(codec.from_item(item)["SK"].removeprefix("MID#"))
                request = resp.get("UnprocessedKeys") or {}
        return known

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
        self, identity: Identity, thread_id: str, messages: Sequence[Message], run: Run, *, last_seq: int
    ) -> AdmittedRun:
        """Append ``messages`` and create ``run`` in the same transaction (the last one, beyond 40 messages).

        ``last_seq`` is the counter as the caller last saw it (``open_and_claim`` returns it), so the first
        attempt reads nothing. A run that exists already cancels the transaction: nothing is stored, and the
        stored run comes back with ``False`` (the caller attaches to it or refuses a conflicting body).
        """
        if any(m.thread_id != thread_id for m in messages):
            raise InvalidRequest("a message belongs to another thread", code="thread_mismatch")
        pending = list({m.id: m for m in messages}.values())
        chunks = [pending[i : i + _MESSAGES_PER_TRANSACTION] for i in range(0, len(pending), _MESSAGES_PER_TRANSACTION)]
        run_item = self._run_item(run)
        base: int | None = last_seq
        stored: list[Message] = []
        for chunk in chunks[:-1]:
            stored += await self._append_chunk(identity, thread_id, chunk, base=base)
            base = None
        try:
            last = chunks[-1] if chunks else []
            stored += await self._append_chunk(identity, thread_id, last, base=base, run_item=run_item)
        except _RunExists:
            existing = await self.get_run(run.tenant_id, run.run_id)
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
        base: int | None = None,
        run_item: dict[str, Any] | None = None,
    ) -> list[Message]:
        """One transaction: counter update (conditioned on its value), an id marker and the body per message, and
        ``run_item`` when given (conditioned on its absence: ``_RunExists`` when it is there).

        A cancelled transaction says why per item: a failed id marker is a duplicate (dropped and retried without
        it); a failed counter is a concurrent writer (re-read and retried). ``base`` is the counter as the caller
        knows it, which saves the read on the first attempt.
        """
        for attempt in range(_MAX_APPEND_ATTEMPTS):
            if attempt:
                # Jittered, growing pause: two writers retrying in lock-step would collide forever.
                await asyncio.sleep(random.uniform(0, 0.005 * 2**attempt))
            if not chunk:
                if run_item is not None:
                    await self._put_run_item(run_item)
                return []
            if base is None or attempt:
                thread = await self.get_thread(identity, thread_id)
                base = thread.last_seq
            numbered = [m.model_copy(update={"seq": base + i + 1}) for i, m in enumerate(chunk)]
            items = self._append_items(identity, thread_id, numbered, base=base, run_item=run_item)
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
        base: int,
        run_item: dict[str, Any] | None,
    ) -> list[dict[str, Any]]:
        """The items of one append transaction, in the order :func:`_cancelled_duplicates` reads them back: the
        counter update, then the id marker and the body of each message, then ``run_item`` when given."""
        pk = codec.thread_pk(identity.tenant_id, thread_id)
        now = utc_now().isoformat()
        values = {":new": base + len(numbered), ":old": base, ":now": now, ":g": f"{now}#{thread_id}"}
        items: list[dict[str, Any]] = [
            {
                "Update": {
                    "TableName": self._table,
                    "Key": codec.to_item({"PK": pk, "SK": codec.META}),
                    "UpdateExpression": "SET last_seq = :new, updated_at = :now, GSI1SK = :g",
                    "ConditionExpression": "owner_user_id = :u AND last_seq = :old",
                    "ExpressionAttributeValues": codec.to_item({**values, ":u": identity.user_id}),
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

    async def read_back(self, tenant_id: str, thread_id: str, *, before_seq: int | None, limit: int) -> list[Message]:
        if before_seq is not None and before_seq <= 1:
            return []
        # The upper bound excludes ``before_seq`` itself, so a page never reads an item it will not return.
        upper = codec.msg_sk(before_seq - 1) if before_seq is not None else "M#~"
        resp = await self._call(
            lambda: self.client.query(
                TableName=self._table,
                KeyConditionExpression="PK = :pk AND SK BETWEEN :lo AND :hi",
                ExpressionAttributeValues=codec.to_item(
                    {":pk": codec.thread_pk(tenant_id, thread_id), ":lo": "M#", ":hi": upper}
                ),
                ScanIndexForward=False,
                Limit=limit,
                ConsistentRead=True,
            )
        )
        return [codec.message_from_item(i) for i in resp.get("Items", [])]

    async def read_forward(self, tenant_id: str, thread_id: str, *, after_seq: int, limit: int) -> list[Message]:
        resp = await self._call(
            lambda: self.client.query(
                TableName=self._table,
                KeyConditionExpression="PK = :pk AND SK BETWEEN :lo AND :hi",
                ExpressionAttributeValues=codec.to_item(
                    {":pk": codec.thread_pk(tenant_id, thread_id), ":lo": codec.msg_sk(after_seq + 1), ":hi": "M#~"}
                ),
                ScanIndexForward=True,
                Limit=limit,
                ConsistentRead=True,
            )
        )
        return [codec.message_from_item(i) for i in resp.get("Items", [])]

    # ---- runs ----------------------------------------------------------------------------------------------

    def _run_item(self, run: Run) -> dict[str, Any]:
        item = codec.run_to_item(run, retention=self.retention.run)
        if run.status is RunStatus.RUNNING:
            created = run.created_at.isoformat()
            item.update(
                codec.to_item(
                    {
                        "GSI2PK": running_gsi(item["PK"]["S"]),
                        "GSI2SK": f"{created}#{run.run_id}",
                        "heartbeat_at": run.heartbeat_at.isoformat(),
                    }
                )
            )
        return item

    async def _put_run_item(self, item: dict[str, Any]) -> None:
        """Store a new run record; ``_RunExists`` when the run is there already."""
        try:
            await self._call(
                lambda: self.client.put_item(
                    TableName=self._table, Item=item, ConditionExpression="attribute_not_exists(PK)"
                )
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            raise _RunExists from exc

    async def create_run(self, run: Run) -> tuple[Run, bool]:
        try:
            await self._put_run_item(self._run_item(run))
        except _RunExists:
            existing = await self.get_run(run.tenant_id, run.run_id)
            if existing is None:  # pragma: no cover - deleted between the two calls
                raise
            return existing, False
        return run, True

    async def get_run(self, tenant_id: str, run_id: str) -> Run | None:
        resp = await self._call(
            lambda: self.client.get_item(
                TableName=self._table,
                Key=codec.to_item({"PK": codec.run_pk(tenant_id, run_id), "SK": codec.META}),
                ConsistentRead=True,
            )
        )
        item = resp.get("Item")
        return codec.run_from_item(item) if item else None

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
        values: dict[str, Any] = {
            ":s": status,
            ":u": json.dumps([u.model_dump() for u in usage]),
            ":now": utc_now().isoformat(),
        }
        expr = "SET #s = :s, #u = :u, updated_at = :now"
        if last_stream_id:
            values[":l"] = last_stream_id
            expr += ", last_stream_id = :l"
        if error_code:
            values[":e"] = error_code
            expr += ", error_code = :e"
        expr += " REMOVE GSI2PK, GSI2SK"  # an ended run leaves the sparse index of running runs
        await self._update_run(tenant_id, run_id, expr, values, names={"#s": "status", "#u": "usage"})

    async def _update_run(
        self,
        tenant_id: str,
        run_id: str,
        expr: str,
        values: dict[str, Any],
        names: dict[str, str] | None = None,
        *,
        return_new: bool = False,
    ) -> dict[str, Any]:
        """Update an existing run; NotFound (never a half-written record) when there is none. With
        ``return_new`` the updated item's attributes come back (same request)."""
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "Key": codec.to_item({"PK": codec.run_pk(tenant_id, run_id), "SK": codec.META}),
            "UpdateExpression": expr,
            "ConditionExpression": "attribute_exists(PK)",
            "ExpressionAttributeValues": codec.to_item(values),
        }
        if names:
            kwargs["ExpressionAttributeNames"] = names
        if return_new:
            kwargs["ReturnValues"] = "ALL_NEW"
        try:
            resp = await self._call(lambda: self.client.update_item(**kwargs))
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ConditionalCheckFailedException":
                raise NotFound("run not found") from exc
            raise
        return dict(resp.get("Attributes", {}))

    async def heartbeat(self, tenant_id: str, run_id: str, *, last_stream_id: str | None) -> Run:
        """Renew the run's lease: one UpdateItem, which also returns the record (a cancel asked through the
        ledger, or the run ended by a takeover) without a second request."""
        values: dict[str, Any] = {":now": utc_now().isoformat()}
        expr = "SET heartbeat_at = :now"
        if last_stream_id:
            values[":l"] = last_stream_id
            expr += ", last_stream_id = :l"
        attributes = await self._update_run(tenant_id, run_id, expr, values, return_new=True)
        return codec.run_from_item(attributes)

    async def request_cancel(self, tenant_id: str, run_id: str) -> None:
        await self._update_run(tenant_id, run_id, "SET cancel_requested = :t", {":t": True})

    async def list_stale_runs(self, *, stale_before: datetime, limit: int) -> list[Run]:
        """Running runs, of every tenant, whose last heartbeat is older than ``stale_before`` (for the sweeper).

        Queries each shard of the sparse GSI2 for runs created before the cut-off (a run's heartbeat is never older
        than its creation), then reads the candidates' records to check their heartbeat.
        """
        keys: list[dict[str, Any]] = []
        cutoff = stale_before.isoformat()
        for shard in range(RUNNING_SHARDS):
            kwargs: dict[str, Any] = {
                "TableName": self._table,
                "IndexName": _RUNNING_INDEX,
                "KeyConditionExpression": "GSI2PK = :p AND GSI2SK < :c",
                "ExpressionAttributeValues": codec.to_item({":p": f"RUNNING#{shard}", ":c": cutoff}),
            }
            while True:
                resp = await self._call(lambda kw=kwargs: self.client.query(**kw))  # type: ignore[misc]
                keys.extend({"PK": i["PK"], "SK": i["SK"]} for i in resp.get("Items", []))
                last = resp.get("LastEvaluatedKey")
                if not last:
                    break
                kwargs = {**kwargs, "ExclusiveStartKey": last}
        stale: list[Run] = []
        for start in range(0, len(keys), 100):
            request: dict[str, Any] = {self._table: {"Keys": keys[start : start + 100], "ConsistentRead": True}}
            while request:
                got = await self._call(lambda req=request: self.client.batch_get_item(RequestItems=req))  # type: ignore[misc]
                for item in got.get("Responses", {}).get(self._table, []):
                    run = codec.run_from_item(item)
                    if run.status is RunStatus.RUNNING and run.heartbeat_at < stale_before:
                        stale.append(run)
                request = got.get("UnprocessedKeys") or {}
        stale.sort(key=lambda r: (r.heartbeat_at, r.run_id))
        return stale[:limit]

    async def abandon_run(self, tenant_id: str, run_id: str, *, stale_before: datetime, error_code: str) -> bool:
        """Mark a run failed if it is still running with a heartbeat older than ``stale_before``.

        Conditional, so of two sweepers (or a sweeper and a run that came back to life) exactly one wins. True when
        this call ended the run.
        """
        try:
            await self._call(
                lambda: self.client.update_item(
                    TableName=self._table,
                    Key=codec.to_item({"PK": codec.run_pk(tenant_id, run_id), "SK": codec.META}),
                    UpdateExpression="SET #s = :failed, error_code = :e, updated_at = :now REMOVE GSI2PK, GSI2SK",
                    ConditionExpression="#s = :running AND heartbeat_at < :stale",
                    ExpressionAttributeNames={"#s": "status"},
                    ExpressionAttributeValues=codec.to_item(
                        {
                            ":failed": RunStatus.FAILED.value,
                            ":running": RunStatus.RUNNING.value,
                            ":e": error_code,
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

    async def list_runs_for_thread(self, tenant_id: str, thread_id: str, *, limit: int) -> list[Run]:
        resp = await self._call(
            lambda: self.client.query(
                TableName=self._table,
                IndexName="GSI1",
                KeyConditionExpression="GSI1PK = :pk",
                ExpressionAttributeValues=codec.to_item({":pk": f"{codec.thread_pk(tenant_id, thread_id)}#RUNS"}),
                Limit=limit,
            )
        )
        return [codec.run_from_item(i) for i in resp.get("Items", [])]

    # ---- audit ---------------------------------------------------------------------------------------------

    async def record(self, record: AuditRecord) -> None:
        item = codec.audit_to_item(record, uuid.uuid4().hex, retention=self.retention.audit)
        await self._call(lambda: self.client.put_item(TableName=self._table, Item=item))

    async def list_for_thread(self, tenant_id: str, thread_id: str, *, limit: int) -> list[AuditRecord]:
        resp = await self._call(
            lambda: self.client.query(
                TableName=self._table,
                KeyConditionExpression="PK = :pk",
                ExpressionAttributeValues=codec.to_item({":pk": codec.audit_pk(tenant_id, thread_id)}),
                Limit=limit,
            )
        )
        return [codec.audit_from_item(i) for i in resp.get("Items", [])]

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


def _cancelled_duplicates(exc: ClientError, numbered: list[Message], *, run_item_at: int | None) -> set[str]:
    """The ids of the messages a cancelled append transaction found stored already (their id marker's condition
    failed); ``_RunExists`` when the run item at ``run_item_at`` was the one there already."""
    reasons = exc.response.get("CancellationReasons", [])
    failed = [i for i, reason in enumerate(reasons) if reason.get("Code") == "ConditionalCheckFailed"]
    if run_item_at is not None and run_item_at in failed:
        raise _RunExists from exc
    # Item 0 is the counter; message k has its id marker at 1 + 2k and its body at 2 + 2k.
    return {numbered[(i - 1) // 2].id for i in failed if 0 < i < 1 + 2 * len(numbered) and i % 2}


def _encode_cursor(key: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(key).encode()).decode()


def _decode_cursor(cursor: str) -> dict[str, Any]:
    try:
        value = json.loads(base64.urlsafe_b64decode(cursor.encode()))
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidRequest("malformed cursor", code="invalid_cursor") from exc
    if not isinstance(value, dict):
        raise InvalidRequest("malformed cursor", code="invalid_cursor")
    return value


def create_table(client: DynamoDBClient, table_name: str) -> None:
    """Create the table as template.yaml defines it (used locally and in tests)."""
    client.create_table(
        TableName=table_name,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[
            {"AttributeName": name, "AttributeType": "S"}
            for name in ("PK", "SK", "GSI1PK", "GSI1SK", "GSI2PK", "GSI2SK")
        ],
        KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}, {"AttributeName": "SK", "KeyType": "RANGE"}],
        GlobalSecondaryIndexes=[
            {
                "IndexName": "GSI1",
                "KeySchema": [
                    {"AttributeName": "GSI1PK", "KeyType": "HASH"},
                    {"AttributeName": "GSI1SK", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "ALL"},
            },
            {
                # Sparse: only running runs carry GSI2PK (see ``running_gsi``); the sweeper reads it.
                "IndexName": _RUNNING_INDEX,
                "KeySchema": [
                    {"AttributeName": "GSI2PK", "KeyType": "HASH"},
                    {"AttributeName": "GSI2SK", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "KEYS_ONLY"},
            },
        ],
    )
