"""DynamoDB adapter for automation tasks (the same single table as threads and runs).

Items:

- the task, in its owner's partition: ``PK = T#{tenant}#U#{user}#TASKS``, ``SK = {task_id}``;
- a lookup item ``PK = TASKREF#{task_id}``, ``SK = META`` naming the owner. The automation handler only gets
  the schedule's input; the lookup lets it find a task by id alone, and its ``attribute_not_exists`` condition
  keeps task ids unique across tenants (the schedule name, in one Scheduler group, is derived from the id).

Both are written and deleted in one transaction, so neither exists without the other.
"""

from __future__ import annotations

import base64
import json
from datetime import datetime
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from shared.adapters.aws.dynamo_codec import from_item, to_item
from shared.adapters.aws.table_adapter import TableAdapter
from shared.automation.models import AutomationTask
from shared.errors import Conflict, InvalidRequest, NotFound

if TYPE_CHECKING:
    pass


META = "META"


def tasks_pk(tenant_id: str, user_id: str) -> str:
    return f"T#{tenant_id}#U#{user_id}#TASKS"


def lookup_pk(task_id: str) -> str:
    return f"TASKREF#{task_id}"


def task_to_item(task: AutomationTask) -> dict[str, Any]:
    return to_item(
        {
            "PK": tasks_pk(task.tenant_id, task.owner_user_id),
            "SK": task.task_id,
            "kind": "automation_task",
            "task_id": task.task_id,
            "tenant_id": task.tenant_id,
            "owner_user_id": task.owner_user_id,
            "name": task.name,
            "schedule_expression": task.schedule_expression,
            "timezone": task.timezone,
            "execution_profile_name": task.execution_profile_name,
            "thread_id": task.thread_id,
            "prompt": task.prompt,
            "tools": list(task.tools),
            "hidden_from_user": task.hidden_from_user,
            "enabled": task.enabled,
            "task_type": task.task_type,
            "created_at": task.created_at.isoformat(),
            "updated_at": task.updated_at.isoformat(),
        }
    )


def task_from_item(item: dict[str, Any]) -> AutomationTask:
    data = from_item(item)
    return AutomationTask(
        task_id=data["task_id"],
        tenant_id=data["tenant_id"],
        owner_user_id=data["owner_user_id"],
        name=data["name"],
        schedule_expression=data["schedule_expression"],
        timezone=data.get("timezone", "UTC"),
        execution_profile_name=data["execution_profile_name"],
        thread_id=data["thread_id"],
        prompt=data.get("prompt", ""),
        tools=tuple(data.get("tools", ())),
        hidden_from_user=bool(data.get("hidden_from_user", True)),
        enabled=bool(data.get("enabled", True)),
        task_type=data.get("task_type"),
        created_at=datetime.fromisoformat(data["created_at"]),
        updated_at=datetime.fromisoformat(data["updated_at"]),
    )


class DynamoDBAutomationStore(TableAdapter):
    """Implements :class:`shared.automation.ports.AutomationStore`; boto3 calls run in worker threads."""

    async def create(self, task: AutomationTask) -> None:
        lookup = to_item(
            {
                "PK": lookup_pk(task.task_id),
                "SK": META,
                "kind": "automation_task_ref",
                "tenant_id": task.tenant_id,
                "owner_user_id": task.owner_user_id,
            }
        )
        try:
            await self._call(
                lambda: self.client.transact_write_items(
                    TransactItems=[
                        {
                            "Put": {
                                "TableName": self._table,
                                "Item": task_to_item(task),
                                "ConditionExpression": "attribute_not_exists(PK)",
                            }
                        },
                        {
                            "Put": {
                                "TableName": self._table,
                                "Item": lookup,
                                "ConditionExpression": "attribute_not_exists(PK)",
                            }
                        },
                    ]
                )
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "TransactionCanceledException":
                raise Conflict("an automation task with this id exists", code="task_exists") from exc
            raise

    async def get(self, tenant_id: str, user_id: str, task_id: str) -> AutomationTask | None:
        resp = await self._call(
            lambda: self.client.get_item(
                TableName=self._table,
                Key=to_item({"PK": tasks_pk(tenant_id, user_id), "SK": task_id}),
                ConsistentRead=True,
            )
        )
        item = resp.get("Item")
        return task_from_item(item) if item else None

    async def find(self, task_id: str) -> AutomationTask | None:
        resp = await self._call(
            lambda: self.client.get_item(
                TableName=self._table, Key=to_item({"PK": lookup_pk(task_id), "SK": META}), ConsistentRead=True
            )
        )
        item = resp.get("Item")
        if not item:
            return None
        ref = from_item(item)
        return await self.get(ref["tenant_id"], ref["owner_user_id"], task_id)

    async def list(
        self, tenant_id: str, user_id: str, *, limit: int, cursor: str | None
    ) -> tuple[list[AutomationTask], str | None]:
        pk = tasks_pk(tenant_id, user_id)
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "PK = :pk",
            "ExpressionAttributeValues": to_item({":pk": pk}),
            "Limit": limit,
        }
        if cursor:
            kwargs["ExclusiveStartKey"] = _decode_cursor(cursor, pk)
        resp = await self._call(lambda: self.client.query(**kwargs))
        tasks = [task_from_item(i) for i in resp.get("Items", [])]
        last = resp.get("LastEvaluatedKey")
        return tasks, _encode_cursor(last) if last else None

    async def replace(self, task: AutomationTask) -> None:
        try:
            await self._call(
                lambda: self.client.put_item(
                    TableName=self._table, Item=task_to_item(task), ConditionExpression="attribute_exists(PK)"
                )
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ConditionalCheckFailedException":
                raise NotFound("automation task not found") from exc
            raise

    async def delete(self, tenant_id: str, user_id: str, task_id: str) -> bool:
        try:
            await self._call(
                lambda: self.client.transact_write_items(
                    TransactItems=[
                        {
                            "Delete": {
                                "TableName": self._table,
                                "Key": to_item({"PK": tasks_pk(tenant_id, user_id), "SK": task_id}),
                                "ConditionExpression": "attribute_exists(PK)",
                            }
                        },
                        {"Delete": {"TableName": self._table, "Key": to_item({"PK": lookup_pk(task_id), "SK": META})}},
                    ]
                )
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "TransactionCanceledException":
                return False
            raise
        return True


def _encode_cursor(key: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(key).encode()).decode()


def _decode_cursor(cursor: str, pk: str) -> dict[str, Any]:
    """A cursor is opaque but client-held: it must point into the caller's own partition."""
    try:
        value = json.loads(base64.urlsafe_b64decode(cursor.encode()))
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidRequest("malformed cursor", code="invalid_cursor") from exc
    if not isinstance(value, dict) or value.get("PK") != to_item({"k": pk})["k"]:
        raise InvalidRequest("malformed cursor", code="invalid_cursor")
    return value
