"""DynamoDB adapter of the run ledger (``shared.ports.runs``): one record per run, beside its thread's partition.

A run's record is ``RUN#<tenant>#<run id>`` / ``META`` (keys in ``dynamo_codec``), listed per thread through GSI1
and, while it runs, indexed in the sparse GSI2 that the stale-run sweeper reads. The threads adapter creates a run in
the same transaction as the messages that start it, so it builds the run item with :meth:`DynamoDBRunLedger.run_item`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from shared.adapters.aws import dynamo_codec as codec
from shared.adapters.aws.table_adapter import TableAdapter
from shared.adapters.aws.table_schema import RUNNING_INDEX, Retention
from shared.errors import NotFound
from shared.models import Run, RunStatus, Usage, utc_now
from shared.ports.runs import RunPosition

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

# Running runs are indexed in GSI2, a sparse KEYS_ONLY index written at creation and removed when the run ends, so the
# sweeper reads only the runs that are still running. Its partition is spread over a few shards so that run creation
# never makes one index partition hot.
RUNNING_SHARDS = 8


class RunExists(Exception):
    """The run record is there already (a retry, or another request with the same run id)."""


def running_gsi(run_pk: str) -> str:
    """The GSI2 partition of a running run: ``RUNNING#<shard>``, the shard a stable hash of the run's key."""
    shard = int(hashlib.sha256(run_pk.encode()).hexdigest()[:8], 16) % RUNNING_SHARDS
    return f"RUNNING#{shard}"


class DynamoDBRunLedger(TableAdapter):
    """The run records of the table; ``retention`` is how long an ended run's record lives (its TTL)."""

    def __init__(
        self, table_name: str, client_factory: Callable[[], DynamoDBClient], *, retention: timedelta | None = None
    ) -> None:
        super().__init__(table_name, client_factory)
        self.retention = retention if retention is not None else Retention().run

    def run_item(self, run: Run) -> dict[str, Any]:
        item = codec.run_to_item(run, retention=self.retention)
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

    async def put_run_item(self, item: dict[str, Any]) -> None:
        """Store a new run record; ``RunExists`` when the run is there already."""
        try:
            await self._call(
                lambda: self.client.put_item(
                    TableName=self._table, Item=item, ConditionExpression="attribute_not_exists(PK)"
                )
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            raise RunExists from exc

    async def create_run(self, run: Run) -> tuple[Run, bool]:
        try:
            await self.put_run_item(self.run_item(run))
        except RunExists:
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
        pending_tool_call_ids: Sequence[str] = (),
        interrupts: Sequence[dict[str, Any]] = (),
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
        outcome = codec.run_outcome_value(pending_tool_call_ids, interrupts)
        if outcome is not None:
            values[":o"] = outcome
            expr += ", outcome = :o"
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
                "IndexName": RUNNING_INDEX,
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

    async def page_thread_runs(
        self, tenant_id: str, thread_id: str, *, limit: int, below: RunPosition | None = None
    ) -> list[Run]:
        """One Query of GSI1 backwards (the run items' thread entry, ``{created}#{run id}``): ``limit`` items read,
        never the thread's messages."""
        values = {":pk": f"{codec.thread_pk(tenant_id, thread_id)}#RUNS"}
        condition = "GSI1PK = :pk"
        if below is not None:
            values[":below"] = codec.run_gsi1_sk(below.created_at, below.run_id)
            condition += " AND GSI1SK < :below"
        resp = await self._call(
            lambda: self.client.query(
                TableName=self._table,
                IndexName="GSI1",
                KeyConditionExpression=condition,
                ExpressionAttributeValues=codec.to_item(values),
                ScanIndexForward=False,
                Limit=limit,
            )
        )
        return [codec.run_from_item(i) for i in resp.get("Items", [])]
