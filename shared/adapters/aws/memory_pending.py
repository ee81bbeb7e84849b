"""DynamoDB adapter for :class:`~shared.memory.ports.PendingExtractions` (same single table).

Items:

- the thread's marker: ``PK = T#{tenant}#TH#{thread}``, ``SK = MEMPENDING`` (outside the ``M#`` range that
  message reads query, beside the extraction cursor ``MEMCURSOR``): ``generation`` (a number only ever raised by
  ``ADD``), ``user_id``, ``noted_at``, and while a memory run holds it ``running_run_id`` and ``lease_until``
  (epoch seconds, so the lease condition is one numeric comparison);
- a user's cancel time: ``PK = T#{tenant}#U#{user}#MEMCTL``, ``SK = CANCELLED``, ``cancelled_at``.

Every change is one conditional ``UpdateItem``: two Lambda instances handling events of the same thread can never
both take the lease.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError

from shared.adapters.aws import dynamo_codec as codec
from shared.adapters.aws.table_adapter import TableAdapter
from shared.memory.models import PendingExtraction

PENDING_SK = "MEMPENDING"
CANCELLED_SK = "CANCELLED"


def _user_control_pk(tenant_id: str, user_id: str) -> str:
    return f"T#{tenant_id}#U#{user_id}#MEMCTL"


def _failed_condition(exc: ClientError) -> bool:
    return exc.response["Error"]["Code"] == "ConditionalCheckFailedException"


class DynamoDBPendingExtractions(TableAdapter):
    def _key(self, tenant_id: str, thread_id: str) -> Any:
        return codec.to_item({"PK": codec.thread_pk(tenant_id, thread_id), "SK": PENDING_SK})

    async def note(self, tenant_id: str, user_id: str, thread_id: str, *, now: datetime) -> int:
        resp = await self._call(
            lambda: self.client.update_item(
                TableName=self._table,
                Key=self._key(tenant_id, thread_id),
                UpdateExpression="ADD generation :one SET user_id = :u, noted_at = :now, kind = :k",
                ExpressionAttributeValues=codec.to_item(
                    {":one": 1, ":u": user_id, ":now": now.isoformat(), ":k": "memory_pending"}
                ),
                ReturnValues="UPDATED_NEW",
            )
        )
        return int(codec.from_item(resp["Attributes"])["generation"])

    async def get(self, tenant_id: str, thread_id: str) -> PendingExtraction | None:
        resp = await self._call(
            lambda: self.client.get_item(
                TableName=self._table, Key=self._key(tenant_id, thread_id), ConsistentRead=True
            )
        )
        item = resp.get("Item")
        if not item:
            return None
        data = codec.from_item(item)
        lease = data.get("lease_until")
        return PendingExtraction(
            tenant_id=tenant_id,
            thread_id=thread_id,
            user_id=str(data["user_id"]),
            generation=int(data["generation"]),
            noted_at=datetime.fromisoformat(str(data["noted_at"])),
            running_run_id=data.get("running_run_id"),
            lease_until=datetime.fromtimestamp(float(lease), UTC) if lease is not None else None,
        )

    async def acquire(
        self, tenant_id: str, thread_id: str, run_id: str, *, now: datetime, lease_until: datetime
    ) -> bool:
        try:
            await self._call(
                lambda: self.client.update_item(
                    TableName=self._table,
                    Key=self._key(tenant_id, thread_id),
                    UpdateExpression="SET running_run_id = :run, lease_until = :until",
                    ConditionExpression="attribute_exists(generation) AND (attribute_not_exists(running_run_id) "
                    "OR lease_until <= :now OR running_run_id = :run)",
                    ExpressionAttributeValues=codec.to_item(
                        {":run": run_id, ":until": int(lease_until.timestamp()), ":now": int(now.timestamp())}
                    ),
                )
            )
        except ClientError as exc:
            if _failed_condition(exc):
                return False
            raise
        return True

    async def hold(
        self, tenant_id: str, user_id: str, thread_id: str, run_id: str, *, now: datetime, lease_until: datetime
    ) -> bool:
        try:
            await self._call(
                lambda: self.client.update_item(
                    TableName=self._table,
                    Key=self._key(tenant_id, thread_id),
                    UpdateExpression="SET running_run_id = :run, lease_until = :until, "
                    "generation = if_not_exists(generation, :zero), user_id = if_not_exists(user_id, :u), "
                    "noted_at = if_not_exists(noted_at, :at), kind = :k",
                    ConditionExpression="attribute_not_exists(running_run_id) OR lease_until <= :now "
                    "OR running_run_id = :run",
                    ExpressionAttributeValues=codec.to_item(
                        {
                            ":run": run_id,
                            ":until": int(lease_until.timestamp()),
                            ":now": int(now.timestamp()),
                            ":zero": 0,
                            ":u": user_id,
                            ":at": now.isoformat(),
                            ":k": "memory_pending",
                        }
                    ),
                )
            )
        except ClientError as exc:
            if _failed_condition(exc):
                return False
            raise
        return True

    async def release(self, tenant_id: str, thread_id: str, run_id: str) -> None:
        try:
            await self._call(
                lambda: self.client.update_item(
                    TableName=self._table,
                    Key=self._key(tenant_id, thread_id),
                    UpdateExpression="REMOVE running_run_id, lease_until",
                    ConditionExpression="running_run_id = :run",
                    ExpressionAttributeValues=codec.to_item({":run": run_id}),
                )
            )
        except ClientError as exc:
            if not _failed_condition(exc):
                raise  # a failed condition: another run holds it now, or the marker was cancelled

    async def cancel_thread(self, tenant_id: str, thread_id: str) -> None:
        await self._call(lambda: self.client.delete_item(TableName=self._table, Key=self._key(tenant_id, thread_id)))

    async def cancel_user(self, tenant_id: str, user_id: str, *, now: datetime) -> None:
        await self._call(
            lambda: self.client.put_item(
                TableName=self._table,
                Item=codec.to_item(
                    {
                        "PK": _user_control_pk(tenant_id, user_id),
                        "SK": CANCELLED_SK,
                        "kind": "memory_cancel",
                        "cancelled_at": now.isoformat(),
                    }
                ),
            )
        )

    async def user_cancelled_at(self, tenant_id: str, user_id: str) -> datetime | None:
        resp = await self._call(
            lambda: self.client.get_item(
                TableName=self._table,
                Key=codec.to_item({"PK": _user_control_pk(tenant_id, user_id), "SK": CANCELLED_SK}),
                ConsistentRead=True,
            )
        )
        item = resp.get("Item")
        return datetime.fromisoformat(str(codec.from_item(item)["cancelled_at"])) if item else None
