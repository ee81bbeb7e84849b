"""Where the migrations keep their state: in the table they migrate, in one small partition of its own.

- the registry: ``PK = MIGRATION``, ``SK = REGISTRY``, one attribute ``m_0001``... per completed migration (its
  name, when, what it changed), written last, when every segment of a pass finished without a failed item;
- a migration's run: ``PK = MIGRATION``, ``SK = RUN#0001``: ``total_segments`` (fixed by the first run: a scan's
  ``LastEvaluatedKey`` is only valid for the same ``TotalSegments``), ``pass_no``, the lease (``lease_owner``,
  ``lease_until_ms``: one runner at a time), and per segment ``seg_<n>`` = its checkpoint: the next
  ``ExclusiveStartKey`` (as JSON), whether it is done, and its counts. Each segment thread writes only its own
  attribute, so checkpoints of parallel segments never overwrite each other.

Neither item has a kind any migration selects. ``MigrationStateTable`` is the runner's synchronous view (it runs in
threads); ``DynamoDBMigrationLog`` is the ``MigrationLog`` port over the same registry item.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from shared.adapters.aws import dynamo_codec as codec
from shared.adapters.aws.table_adapter import TableAdapter
from shared.errors import Conflict
from shared.migrations.model import CompletedMigration, Migration

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

STATE_PK = "MIGRATION"
REGISTRY_SK = "REGISTRY"


def run_key(migration_id: int) -> dict[str, Any]:
    return codec.to_item({"PK": STATE_PK, "SK": f"RUN#{migration_id:04d}"})


REGISTRY_KEY = codec.to_item({"PK": STATE_PK, "SK": REGISTRY_SK})


@dataclass(slots=True)
class Counts:
    """What a segment (or a run) did. ``scanned``: items the scan read; ``matched``: those its filter returned;
    then each matched item is exactly one of ``changed``, ``unchanged`` (already in the new shape), ``already``
    (at the new version when re-read after a conflict), ``gone`` (deleted meanwhile) or ``failed``; ``conflicts``
    counts refused conditional writes (an item may meet several before it is changed)."""

    scanned: int = 0
    matched: int = 0
    changed: int = 0
    unchanged: int = 0
    already: int = 0
    gone: int = 0
    failed: int = 0
    conflicts: int = 0

    def add(self, other: Counts) -> None:
        for name, value in asdict(other).items():
            setattr(self, name, getattr(self, name) + value)

    @classmethod
    def from_map(cls, data: Mapping[str, Any]) -> Counts:
        return cls(**{name: int(data.get(name, 0)) for name in cls.__dataclass_fields__})


@dataclass(slots=True)
class SegmentProgress:
    next_key: dict[str, Any] | None = None
    """The wire-form ``ExclusiveStartKey`` to go on from; None: from the start (or, when ``done``, nothing left)."""
    done: bool = False
    counts: Counts = field(default_factory=Counts)

    def as_map(self) -> dict[str, Any]:
        data: dict[str, Any] = {"done": self.done, "counts": asdict(self.counts)}
        if self.next_key is not None:
            data["next"] = json.dumps(self.next_key, sort_keys=True)
        return data

    @classmethod
    def from_map(cls, data: Mapping[str, Any]) -> SegmentProgress:
        nxt = data.get("next")
        return cls(json.loads(nxt) if nxt else None, bool(data.get("done")), Counts.from_map(data.get("counts", {})))


@dataclass(slots=True)
class RunState:
    migration_id: int
    total_segments: int
    pass_no: int
    segments: dict[int, SegmentProgress]
    completed_at: str | None = None

    @property
    def all_done(self) -> bool:
        return all(self.segment(n).done for n in range(self.total_segments))

    def segment(self, number: int) -> SegmentProgress:
        return self.segments.setdefault(number, SegmentProgress())

    def totals(self) -> Counts:
        total = Counts()
        for progress in self.segments.values():
            total.add(progress.counts)
        return total

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> RunState:
        data = codec.from_item(dict(item))
        segments = {int(k[4:]): SegmentProgress.from_map(v) for k, v in data.items() if k.startswith("seg_")}
        return cls(
            int(str(data["SK"]).removeprefix("RUN#")),
            int(data["total_segments"]),
            int(data.get("pass_no", 1)),
            segments,
            data.get("completed_at"),
        )


def _conditional_failure(exc: ClientError) -> bool:
    return exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException"


class MigrationStateTable:
    """The runner's state items, read and written synchronously (the runner's segments run in threads)."""

    def __init__(self, table: str, client: DynamoDBClient, *, clock: Callable[[], float] = time.time) -> None:
        self._table, self._client, self._clock = table, client, clock

    def completed(self) -> dict[int, CompletedMigration]:
        item = self._client.get_item(TableName=self._table, Key=REGISTRY_KEY, ConsistentRead=True).get("Item")
        return registry_from_item(item or {})

    def record_completed(self, record: CompletedMigration) -> None:
        self._client.update_item(
            TableName=self._table,
            Key=REGISTRY_KEY,
            UpdateExpression="SET #m = :m, kind = :k",
            ExpressionAttributeNames={"#m": f"m_{record.id:04d}"},
            ExpressionAttributeValues=codec.to_item({":m": _record_map(record), ":k": "migration_registry"}),
        )

    def load(self, migration_id: int) -> RunState | None:
        item = self._client.get_item(TableName=self._table, Key=run_key(migration_id), ConsistentRead=True)
        return RunState.from_item(item["Item"]) if "Item" in item else None

    def begin(self, migration: Migration, *, total_segments: int, owner: str, lease_s: float) -> RunState:
        """Take the run's lease (free, expired, or already ours) and return its state; ``total_segments`` only
        counts for a first run. Raises ``Conflict(code="migration_busy")`` when another runner holds it."""
        now = self._clock()
        try:
            resp = self._client.update_item(
                TableName=self._table,
                Key=run_key(migration.id),
                UpdateExpression=(
                    "SET lease_owner = :me, lease_until_ms = :exp, kind = :k, migration = :label, "
                    "total_segments = if_not_exists(total_segments, :ts), pass_no = if_not_exists(pass_no, :one)"
                ),
                ConditionExpression="attribute_not_exists(lease_owner) OR lease_until_ms < :now OR lease_owner = :me",
                ExpressionAttributeValues=codec.to_item(
                    {
                        ":me": owner,
                        ":exp": _ms(now + lease_s),
                        ":now": _ms(now),
                        ":k": "migration_run",
                        ":label": migration.label,
                        ":ts": total_segments,
                        ":one": 1,
                    }
                ),
                ReturnValues="ALL_NEW",
            )
        except ClientError as exc:
            if _conditional_failure(exc):
                raise Conflict(
                    f"migration {migration.label} is being run by another runner", code="migration_busy"
                ) from exc
            raise
        return RunState.from_item(resp["Attributes"])

    def start_pass(self, state: RunState, *, owner: str) -> RunState:
        """Every segment back to the start, for one more pass (the last one left items it could not migrate)."""
        names = {f"#s{n}": f"seg_{n}" for n in range(state.total_segments)}
        self._owned_update(
            state.migration_id,
            owner,
            f"SET pass_no = pass_no + :one REMOVE {', '.join(names)}",
            {":one": 1},
            names,
        )
        return RunState(state.migration_id, state.total_segments, state.pass_no + 1, {})

    def checkpoint(
        self, migration_id: int, segment: int, progress: SegmentProgress, *, owner: str, lease_s: float
    ) -> None:
        """Save one segment's progress and renew the lease. ``Conflict(code="migration_lease_lost")`` when the
        lease is no longer ours (it expired and another runner took it): the caller stops."""
        self._owned_update(
            migration_id,
            owner,
            "SET #seg = :seg, lease_until_ms = :exp",
            {":seg": progress.as_map(), ":exp": _ms(self._clock() + lease_s)},
            {"#seg": f"seg_{segment}"},
        )

    def finish(self, migration_id: int, *, owner: str, at: datetime) -> None:
        self._owned_update(migration_id, owner, "SET completed_at = :at", {":at": at.isoformat()}, {})

    def release(self, migration_id: int, *, owner: str) -> None:
        """Give the lease back (a lease lost meanwhile is nobody's to give)."""
        try:
            self._owned_update(migration_id, owner, "REMOVE lease_owner, lease_until_ms", {}, {})
        except Conflict:
            pass

    def _owned_update(
        self, migration_id: int, owner: str, expression: str, values: dict[str, Any], names: dict[str, str]
    ) -> None:
        extra: dict[str, Any] = {"ExpressionAttributeNames": names} if names else {}
        try:
            self._client.update_item(
                TableName=self._table,
                Key=run_key(migration_id),
                UpdateExpression=expression,
                ConditionExpression="lease_owner = :me",
                ExpressionAttributeValues=codec.to_item({**values, ":me": owner}),
                **extra,
            )
        except ClientError as exc:
            if _conditional_failure(exc):
                raise Conflict(f"migration {migration_id}: the lease was lost", code="migration_lease_lost") from exc
            raise


def _ms(epoch_s: float) -> int:
    return int(epoch_s * 1000)


def _record_map(record: CompletedMigration) -> dict[str, Any]:
    return {
        "name": record.name,
        "completed_at": record.completed_at.isoformat(),
        "changed": record.changed,
        "scanned": record.scanned,
    }


def registry_from_item(item: Mapping[str, Any]) -> dict[int, CompletedMigration]:
    data = codec.from_item(dict(item))
    found: dict[int, CompletedMigration] = {}
    for name, value in data.items():
        if name.startswith("m_"):
            migration_id = int(name[2:])
            found[migration_id] = CompletedMigration(
                migration_id,
                str(value["name"]),
                datetime.fromisoformat(value["completed_at"]),
                int(value["changed"]),
                int(value["scanned"]),
            )
    return found


class DynamoDBMigrationLog(TableAdapter):
    """The ``MigrationLog`` port on the registry item. An eventually consistent read: a migration that completed
    a moment ago may still show as pending, which only keeps the slower, always-right readers a little longer."""

    async def completed(self) -> dict[int, CompletedMigration]:
        resp = await self._call(lambda: self.client.get_item(TableName=self._table, Key=REGISTRY_KEY))
        return registry_from_item(resp.get("Item", {}))

    async def record_completed(self, record: CompletedMigration) -> None:
        await self._call(lambda: MigrationStateTable(self._table, self.client).record_completed(record))
