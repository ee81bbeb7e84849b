"""DynamoDB adapter for :class:`~shared.ports.thread_state.ThreadStateStore` (same single table).

One item per thread, in the thread's partition so that deleting the thread's items deletes it too:
``PK = T#{tenant}#TH#{thread}``, ``SK = STATE`` (outside the ``M#`` range that message reads query), with
``owner_user_id``, ``version`` (a number only ever raised by one) and ``state_json`` (the state as compact JSON: a
string keeps numbers exactly as JSON wrote them, where a DynamoDB map would turn them into decimals).

A write is one conditional ``PutItem``: the owner must match, and, for a patch, the version it read.
"""

from __future__ import annotations

import json
from typing import Any, NoReturn

from botocore.exceptions import ClientError

from shared.adapters.aws import dynamo_codec as codec
from shared.adapters.aws.table_adapter import TableAdapter
from shared.errors import Conflict, NotFound
from shared.models import Identity, utc_now
from shared.thread_state.limits import encoded_state
from shared.thread_state.models import StoredState

STATE_SK = "STATE"


class DynamoDBThreadStates(TableAdapter):
    def _key(self, tenant_id: str, thread_id: str) -> Any:
        return codec.to_item({"PK": codec.thread_pk(tenant_id, thread_id), "SK": STATE_SK})

    async def read(self, identity: Identity, thread_id: str) -> StoredState | None:
        resp = await self._call(
            lambda: self.client.get_item(
                TableName=self._table, Key=self._key(identity.tenant_id, thread_id), ConsistentRead=True
            )
        )
        if "Item" not in resp:
            return None
        item = codec.from_item(resp["Item"])
        if item.get("owner_user_id") != identity.user_id:
            return None
        return StoredState(json.loads(item["state_json"]), int(item["version"]))

    async def write(
        self, identity: Identity, thread_id: str, state: dict[str, Any], *, expected_version: int | None
    ) -> StoredState:
        key = self._key(identity.tenant_id, thread_id)
        condition = "attribute_not_exists(PK) OR owner_user_id = :u"
        values: dict[str, Any] = {":u": identity.user_id}
        if expected_version is not None:
            condition = "attribute_not_exists(PK)" if expected_version == 0 else "owner_user_id = :u AND version = :v"
            if expected_version:
                values[":v"] = expected_version
            else:
                values = {}
        try:
            resp = await self._call(
                lambda: self.client.update_item(
                    TableName=self._table,
                    Key=key,
                    UpdateExpression="SET owner_user_id = :owner, state_json = :s, updated_at = :now, kind = :k "
                    "ADD version :one",
                    ConditionExpression=condition,
                    ExpressionAttributeValues=codec.to_item(
                        {
                            **values,
                            ":owner": identity.user_id,
                            ":s": encoded_state(state),
                            ":now": utc_now().isoformat(),
                            ":k": "thread_state",
                            ":one": 1,
                        }
                    ),
                    ReturnValues="UPDATED_NEW",
                )
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            await self._refuse(identity, thread_id)
        return StoredState(state, int(codec.from_item(resp["Attributes"])["version"]))

    async def _refuse(self, identity: Identity, thread_id: str) -> NoReturn:
        """Why a conditional write failed: someone else's state (NotFound), else a version that moved on."""
        resp = await self._call(
            lambda: self.client.get_item(TableName=self._table, Key=self._key(identity.tenant_id, thread_id))
        )
        owner = codec.from_item(resp["Item"]).get("owner_user_id") if "Item" in resp else None
        if owner is not None and owner != identity.user_id:
            raise NotFound("thread not found")
        raise Conflict("the thread's state changed since it was read", code="state_version_conflict")

    async def delete(self, tenant_id: str, thread_id: str) -> None:
        await self._call(lambda: self.client.delete_item(TableName=self._table, Key=self._key(tenant_id, thread_id)))
