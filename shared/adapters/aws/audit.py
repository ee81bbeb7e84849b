"""DynamoDB adapter of the audit log (``shared.ports.audit``): one item per record in the thread's audit partition
(``AUDIT#<tenant>#<thread>``, apart from the thread's own, so deleting a thread keeps its audit), with a TTL.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING

from shared.adapters.aws import dynamo_codec as codec
from shared.adapters.aws.table_adapter import TableAdapter
from shared.adapters.aws.table_schema import Retention
from shared.models import AuditRecord

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


class DynamoDBAuditLog(TableAdapter):
    """The audit records of the table; ``retention`` is how long a record lives (its TTL)."""

    def __init__(
        self, table_name: str, client_factory: Callable[[], DynamoDBClient], *, retention: timedelta | None = None
    ) -> None:
        super().__init__(table_name, client_factory)
        self.retention = retention if retention is not None else Retention().audit

    async def record(self, record: AuditRecord) -> None:
        item = codec.audit_to_item(record, uuid.uuid4().hex, retention=self.retention)
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
