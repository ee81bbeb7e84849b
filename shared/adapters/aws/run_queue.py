"""DynamoDB adapter of :class:`~shared.ports.run_queue.RunQueue` (same single table, the thread's partition).

Items, in the thread's partition so that deleting the thread deletes its queue too (outside the ``M#`` range that
message reads query):

- ``SK = QUEUE``: the counter, ``next_seq`` (the next entry's number, only ever raised);
- ``SK = QUEUED#<seq, 12 digits>``: one entry, its body zlib-compressed (a request body may be larger than a map
  attribute would like; an item stays under 400 KB).

and, in the run's own partition (``T#{tenant}#R#{run}``, beside its future ledger record), ``SK = QUEUED``: the
entry's thread and caller, so that ``GET /runs/{runId}/events`` finds a run that has not started yet.

An enqueue reads the counter and the entries (one query), then writes the counter, the entry and the run's marker
in one transaction, conditional on the counter it read: two enqueues at once cannot both take the last place, and
the numbers, hence the order, come from the store. A removal deletes the entry (conditionally: one remover wins)
and the marker in one transaction.
"""

from __future__ import annotations

import zlib
from datetime import datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

from shared.adapters.aws import dynamo_codec as codec
from shared.adapters.aws.table_adapter import TableAdapter
from shared.errors import PayloadTooLarge
from shared.ports.run_queue import QueuedRun, QueuedRunRef

COUNTER_SK = "QUEUE"
MARKER_SK = "QUEUED"
MARKER_TTL = timedelta(days=1)
"""A marker outlives its entry only if a removal failed half-way (it cannot: one transaction); TTL as a backstop."""
ENTRY_PREFIX = "QUEUED#"
MAX_ENTRY_BYTES = 350_000
"""A compressed body larger than this cannot be queued (a DynamoDB item holds at most 400 KB)."""
ATTEMPTS = 8
"""An enqueue that lost a race to another one on the same thread is tried again this often."""


def _entry_sk(seq: int) -> str:
    return f"{ENTRY_PREFIX}{seq:012d}"


def _condition_failed(exc: ClientError) -> bool:
    code = exc.response["Error"]["Code"]
    return code in {"ConditionalCheckFailedException", "TransactionCanceledException"}


class DynamoDBRunQueue(TableAdapter):
    async def _read(self, tenant_id: str, thread_id: str) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        """The counter (None before the first enqueue) and the entries, oldest first, in one query."""
        pk = codec.thread_pk(tenant_id, thread_id)
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "PK = :pk AND SK BETWEEN :lo AND :hi",
            "ExpressionAttributeValues": codec.to_item({":pk": pk, ":lo": COUNTER_SK, ":hi": f"{ENTRY_PREFIX}~"}),
            "ConsistentRead": True,
        }
        items: list[dict[str, Any]] = []
        while True:
            resp = await self._call(lambda: self.client.query(**kwargs))
            items += [codec.from_item(i) for i in resp.get("Items", [])]
            if "LastEvaluatedKey" not in resp:
                break
            kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]
        counter = next((i for i in items if i["SK"] == COUNTER_SK), None)
        entries = sorted((i for i in items if str(i["SK"]).startswith(ENTRY_PREFIX)), key=lambda i: str(i["SK"]))
        return counter, entries

    async def enqueue(self, tenant_id: str, thread_id: str, entry: QueuedRun, *, depth: int) -> int | None:
        body = zlib.compress(entry.body)
        if len(body) > MAX_ENTRY_BYTES:
            raise PayloadTooLarge("the request is too large to be queued")
        for _ in range(ATTEMPTS):
            counter, entries = await self._read(tenant_id, thread_id)
            for position, item in enumerate(entries, start=1):
                if item["run_id"] == entry.run_id:
                    return position
            if len(entries) >= depth:
                return None
            try:
                await self._write(tenant_id, thread_id, entry, body, counter)
            except ClientError as exc:
                if not _condition_failed(exc):
                    raise
                continue  # another enqueue or a removal came first: read again
            return len(entries) + 1
        return None

    async def _write(
        self, tenant_id: str, thread_id: str, entry: QueuedRun, body: bytes, counter: dict[str, Any] | None
    ) -> None:
        pk = codec.thread_pk(tenant_id, thread_id)
        seq = int(counter["next_seq"]) if counter else 1
        if counter is None:
            condition, values = "attribute_not_exists(PK)", {}
        else:
            condition, values = "next_seq = :seq", {":seq": seq}
        item = {
            "PK": pk,
            "SK": _entry_sk(seq),
            "kind": "queued_run",
            "run_id": entry.run_id,
            "user_id": entry.user_id,
            "scopes": list(entry.scopes),
            "body_z": body,
            "enqueued_at": entry.enqueued_at.isoformat(),
            "waiter_until": str(entry.waiter_until),
        }
        counter_update = {
            "Update": {
                "TableName": self._table,
                "Key": codec.to_item({"PK": pk, "SK": COUNTER_SK}),
                "UpdateExpression": "SET next_seq = :next, kind = :k",
                "ConditionExpression": condition,
                "ExpressionAttributeValues": codec.to_item({**values, ":next": seq + 1, ":k": "run_queue"}),
            }
        }
        put = {
            "Put": {
                "TableName": self._table,
                "Item": codec.to_item(item),
                "ConditionExpression": "attribute_not_exists(PK)",
            }
        }
        marker = {
            "Put": {
                "TableName": self._table,
                "Item": codec.to_item(
                    {
                        "PK": codec.run_pk(tenant_id, entry.run_id),
                        "SK": MARKER_SK,
                        "kind": "queued_run_marker",
                        "thread_id": thread_id,
                        "user_id": entry.user_id,
                        codec.TTL_ATTRIBUTE: codec.expires_at(entry.enqueued_at, MARKER_TTL),
                    }
                ),
            }
        }
        await self._call(lambda: self.client.transact_write_items(TransactItems=[counter_update, put, marker]))  # type: ignore[list-item]

    async def entries(self, tenant_id: str, thread_id: str) -> list[QueuedRun]:
        _, items = await self._read(tenant_id, thread_id)
        return [_from_item(i) for i in items]

    async def remove(self, tenant_id: str, thread_id: str, run_id: str) -> bool:
        pk = codec.thread_pk(tenant_id, thread_id)
        _, items = await self._read(tenant_id, thread_id)
        found = next((i for i in items if i["run_id"] == run_id), None)
        if found is None:
            return False
        delete = {
            "Delete": {
                "TableName": self._table,
                "Key": codec.to_item({"PK": pk, "SK": found["SK"]}),
                "ConditionExpression": "attribute_exists(PK)",
            }
        }
        unmark = {
            "Delete": {
                "TableName": self._table,
                "Key": codec.to_item({"PK": codec.run_pk(tenant_id, run_id), "SK": MARKER_SK}),
            }
        }
        try:
            await self._call(lambda: self.client.transact_write_items(TransactItems=[delete, unmark]))  # type: ignore[list-item]
        except ClientError as exc:
            if not _condition_failed(exc):
                raise
            return False  # removed by another caller at the same moment
        return True

    async def find(self, tenant_id: str, run_id: str) -> QueuedRunRef | None:
        resp = await self._call(
            lambda: self.client.get_item(
                TableName=self._table,
                Key=codec.to_item({"PK": codec.run_pk(tenant_id, run_id), "SK": MARKER_SK}),
                ConsistentRead=True,
            )
        )
        if "Item" not in resp:
            return None
        item = codec.from_item(resp["Item"])
        return QueuedRunRef(thread_id=str(item["thread_id"]), user_id=str(item["user_id"]))


def _from_item(item: dict[str, Any]) -> QueuedRun:
    body_z = item["body_z"]
    raw = bytes(body_z.value if hasattr(body_z, "value") else body_z)
    return QueuedRun(
        run_id=str(item["run_id"]),
        user_id=str(item["user_id"]),
        scopes=tuple(str(s) for s in item.get("scopes", [])),
        body=zlib.decompress(raw),
        enqueued_at=datetime.fromisoformat(str(item["enqueued_at"])),
        waiter_until=float(item["waiter_until"]),
    )
