"""DynamoDB adapter for the memory store (same single table as the conversation store).

Keys:

- a memory: ``PK = T#{tenant}#U#{user}#MEM``, ``SK = {memory id}``; the whole memory is one JSON attribute
  ``data`` plus ``status`` (so a status change can be conditioned on ``status = active``);
- the per-thread extraction cursor: ``PK = T#{tenant}#TH#{thread}``, ``SK = MEMCURSOR``, ``last_seq``. It sits
  in the thread's partition but outside the ``M#`` range that message reads query.

Because the user is part of the partition key, a memory id of another user is simply not found: there is no
way to read or change someone else's memory through this adapter.

Every memory item is written at the current schema version of its kind (``schema_v``, ``shared.migrations``).
Items of the old shape (active memories written before the bounded read, without the index attributes) are still
read right during the migration window: until migration 1 (``0001-active-memory-index``) is recorded as completed,
``list_active`` reads the user's partition instead of the index (``_list_active_old_shape``, to be removed in the
release after every deployment has completed it: docs/deployment.md "Upgrading: data migrations").
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from shared.adapters.aws import dynamo_codec as codec
from shared.adapters.aws.table_adapter import TableAdapter
from shared.memory.models import Deactivation, Memory, MemoryStatus
from shared.migrations.model import SCHEMA_VERSION
from shared.migrations.registry import current_version
from shared.models import utc_now

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


CURSOR_SK = "MEMCURSOR"
MEMORY_KIND = "memory"


def memory_pk(tenant_id: str, user_id: str) -> str:
    return f"T#{tenant_id}#U#{user_id}#MEM"


class DynamoDBMemoryStore(TableAdapter):
    """``index_complete`` says whether every active memory of the table is in the index (migration 1 completed:
    the wiring asks ``PendingMigrations``); None: the table was never written in the old shape (tests, a table
    made by this version)."""

    def __init__(
        self,
        table_name: str,
        client_factory: Callable[[], DynamoDBClient],
        *,
        index_complete: Callable[[], Awaitable[bool]] | None = None,
    ) -> None:
        super().__init__(table_name, client_factory)
        self._index_complete = index_complete

    # ---- memories ------------------------------------------------------------------------------------------

    async def list_memories(self, tenant_id: str, user_id: str, *, include_inactive: bool = False) -> list[Memory]:
        # No FilterExpression: it would apply after Limit; a user's memories are read whole, page by page.
        memories: list[Memory] = []
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "PK = :pk",
            "ExpressionAttributeValues": codec.to_item({":pk": memory_pk(tenant_id, user_id)}),
            "ConsistentRead": True,
        }
        while True:
            resp = await self._call(lambda kw=dict(kwargs): self.client.query(**kw))  # type: ignore[misc]
            for item in resp.get("Items", []):
                memory = _from_item(item)
                if include_inactive or memory.is_active:
                    memories.append(memory)
            last = resp.get("LastEvaluatedKey")
            if not last:
                break
            kwargs["ExclusiveStartKey"] = last
        return sorted(memories, key=lambda m: (m.created_at, m.id), reverse=True)

    async def list_active(self, tenant_id: str, user_id: str, *, limit: int) -> list[Memory]:
        """The user's ``limit`` most recently updated active memories: one Query of the sparse index of active
        memories (``GSI1``, written only while a memory is active), so its cost does not grow with the user's
        history of memories. Eventually consistent, as every index read. In the migration window (the index not
        yet complete) the old-shape reader answers instead."""
        if self._index_complete is not None and not await self._index_complete():
            return await self._list_active_old_shape(tenant_id, user_id, limit=limit)
        resp = await self._call(
            lambda: self.client.query(
                TableName=self._table,
                IndexName="GSI1",
                KeyConditionExpression="GSI1PK = :p",
                ExpressionAttributeValues=codec.to_item({":p": active_memories_gsi(tenant_id, user_id)}),
                ScanIndexForward=False,
                Limit=limit,
            )
        )
        return [m for m in (_from_item(i) for i in resp.get("Items", [])) if m.is_active]

    async def _list_active_old_shape(self, tenant_id: str, user_id: str, *, limit: int) -> list[Memory]:
        """OLD-SHAPE READER (remove once migration 1 has completed on every deployment): the same answer as the
        index read, from the user's whole partition, so it also finds active memories without index attributes.
        Its cost grows with the user's history of memories, as the read before the bounded read did."""
        active = await self.list_memories(tenant_id, user_id)
        return sorted(active, key=lambda m: (m.updated_at, m.id), reverse=True)[:limit]

    async def get(self, tenant_id: str, user_id: str, memory_id: str) -> Memory | None:
        resp = await self._call(
            lambda: self.client.get_item(
                TableName=self._table,
                Key=codec.to_item({"PK": memory_pk(tenant_id, user_id), "SK": memory_id}),
                ConsistentRead=True,
            )
        )
        item = resp.get("Item")
        return _from_item(item) if item else None

    async def put(self, memory: Memory) -> None:
        item = _to_item(memory)
        await self._call(lambda: self.client.put_item(TableName=self._table, Item=item))

    async def deactivate(self, tenant_id: str, user_id: str, memory_id: str, change: Deactivation) -> Memory | None:
        current = await self.get(tenant_id, user_id, memory_id)
        if current is None or not current.is_active:
            return None
        updated = change.applied_to(current, utc_now())
        item = _to_item(updated)
        try:
            await self._call(
                lambda: self.client.put_item(
                    TableName=self._table,
                    Item=item,
                    ConditionExpression="#s = :active",
                    ExpressionAttributeNames={"#s": "status"},
                    ExpressionAttributeValues=codec.to_item({":active": MemoryStatus.ACTIVE.value}),
                )
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ConditionalCheckFailedException":
                return None  # changed or removed concurrently
            raise
        return updated

    async def delete(self, tenant_id: str, user_id: str, memory_id: str) -> bool:
        resp = await self._call(
            lambda: self.client.delete_item(
                TableName=self._table,
                Key=codec.to_item({"PK": memory_pk(tenant_id, user_id), "SK": memory_id}),
                ReturnValues="ALL_OLD",
            )
        )
        return bool(resp.get("Attributes"))

    # ---- extraction cursor ---------------------------------------------------------------------------------

    async def get_cursor(self, tenant_id: str, thread_id: str) -> int:
        resp = await self._call(
            lambda: self.client.get_item(
                TableName=self._table,
                Key=codec.to_item({"PK": codec.thread_pk(tenant_id, thread_id), "SK": CURSOR_SK}),
                ConsistentRead=True,
            )
        )
        item = resp.get("Item")
        return int(codec.from_item(item).get("last_seq", 0)) if item else 0

    async def advance_cursor(self, tenant_id: str, thread_id: str, seq: int) -> None:
        try:
            await self._call(
                lambda: self.client.update_item(
                    TableName=self._table,
                    Key=codec.to_item({"PK": codec.thread_pk(tenant_id, thread_id), "SK": CURSOR_SK}),
                    UpdateExpression="SET last_seq = :s, updated_at = :now, kind = :k",
                    ConditionExpression="attribute_not_exists(last_seq) OR last_seq < :s",
                    ExpressionAttributeValues=codec.to_item(
                        {":s": seq, ":now": utc_now().isoformat(), ":k": "memory_cursor"}
                    ),
                )
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise  # a failed condition means the cursor is already at or past seq


def active_memories_gsi(tenant_id: str, user_id: str) -> str:
    """The ``GSI1`` partition of a user's active memories (sorted by ``updated_at``)."""
    return f"{memory_pk(tenant_id, user_id)}#ACTIVE"


def _to_item(memory: Memory) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "PK": memory_pk(memory.tenant_id, memory.user_id),
        "SK": memory.id,
        "kind": MEMORY_KIND,
        "status": memory.status.value,
        "data": memory.model_dump_json(),
        SCHEMA_VERSION: current_version(MEMORY_KIND),
    }
    if memory.is_active:
        # Sparse: a deactivated memory is written without these and leaves the index.
        fields["GSI1PK"] = active_memories_gsi(memory.tenant_id, memory.user_id)
        fields["GSI1SK"] = f"{memory.updated_at.isoformat()}#{memory.id}"
    return codec.to_item(fields)


def _from_item(item: dict[str, Any]) -> Memory:
    return Memory.model_validate_json(codec.from_item(item)["data"])
