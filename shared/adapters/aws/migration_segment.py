"""One segment of a migration's parallel scan: read a page, migrate each item it returns, save the checkpoint.

Per item the write is a ``PutItem`` of the migrated item on the condition that the item still exists, still has
the schema version that was read (or none, as read) and the same values of the migration's ``guard`` attributes.
So a write by the app between the scan's read and this write is never overwritten: the condition fails, the item
is read again (strongly consistent) and migrated from what the app wrote, or skipped when the app already wrote it
at the new version (the app stamps the current version on what it writes). Nor is an item the app deleted in
between written back. A page whose items were written but whose checkpoint was not (the process was killed) is
read again on resume; its migrated items are at the new version, which the scan filter leaves out, so no item is
written twice.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from botocore.exceptions import ClientError

from shared.adapters.aws import dynamo_codec as codec
from shared.adapters.aws.migration_state import Counts, SegmentProgress
from shared.adapters.aws.write_budget import WriteBudget, write_units
from shared.migrations.model import SCHEMA_VERSION, Migration, item_version

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

logger = logging.getLogger(__name__)

MAX_ATTEMPTS = 5
"""Conditional writes tried on one item before it counts as failed (each refusal means the app wrote it again)."""

Wire = dict[str, Any]
Outcome = Literal["changed", "unchanged", "already", "gone", "failed", "conflict"]


@dataclass(frozen=True, slots=True)
class ScanPlan:
    """What every segment of one run shares."""

    table: str
    migration: Migration
    total_segments: int
    page_size: int
    dry_run: bool


def scan_filter(migration: Migration) -> dict[str, Any]:
    """The scan's filter: the migration's items, below its version (what the app or a run already migrated is
    left out; it is still read, and billed, but not returned)."""
    expression = "#kind = :kind AND (attribute_not_exists(#v) OR #v < :to)"
    names = {"#kind": "kind", "#v": SCHEMA_VERSION}
    values: dict[str, Any] = {":kind": migration.items.kind, ":to": migration.to_version}
    if migration.items.key_prefix is not None:
        expression += " AND begins_with(#pk, :prefix)"
        names["#pk"] = "PK"
        values[":prefix"] = migration.items.key_prefix
    return {
        "FilterExpression": expression,
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": codec.to_item(values),
    }


def write_condition(read: Wire, guard: tuple[str, ...]) -> dict[str, Any]:
    """Exists, same version as read, same guard values as read (all compared in wire form)."""
    names = {"#pk": "PK", "#v": SCHEMA_VERSION}
    values: dict[str, Any] = {}
    parts = ["attribute_exists(#pk)"]
    if SCHEMA_VERSION in read:
        parts.append("#v = :v")
        values[":v"] = read[SCHEMA_VERSION]
    else:
        parts.append("attribute_not_exists(#v)")
    for i, attribute in enumerate(guard):
        names[f"#g{i}"] = attribute
        if attribute in read:
            parts.append(f"#g{i} = :g{i}")
            values[f":g{i}"] = read[attribute]
        else:
            parts.append(f"attribute_not_exists(#g{i})")
    condition: dict[str, Any] = {"ConditionExpression": " AND ".join(parts), "ExpressionAttributeNames": names}
    if values:
        condition["ExpressionAttributeValues"] = values
    return condition


class SegmentWorker:
    """Runs segments of one plan. ``save`` stores a segment's checkpoint (None in a dry run: nothing is written);
    ``stop`` is asked before each page (the time budget, or another segment's failure)."""

    def __init__(
        self,
        client: DynamoDBClient,
        plan: ScanPlan,
        budget: WriteBudget,
        *,
        save: Callable[[int, SegmentProgress], None] | None,
        stop: Callable[[], bool],
    ) -> None:
        self._client, self._plan, self._budget = client, plan, budget
        self._save, self._stop = save, stop
        self._lock = threading.Lock()
        self.pages = 0
        """Pages this worker read, all segments together (what this run did, whatever earlier runs did)."""

    def run(self, segment: int, progress: SegmentProgress) -> SegmentProgress:
        while not progress.done and not self._stop():
            page = self._scan(segment, progress.next_key)
            counts = Counts(scanned=int(page.get("ScannedCount", 0)))
            for raw in page.get("Items", []):
                counts.matched += 1
                self._migrate(raw, counts)
            progress.counts.add(counts)
            progress.next_key = page.get("LastEvaluatedKey")
            progress.done = progress.next_key is None
            if self._save is not None:
                self._budget.spend(1)
                self._save(segment, progress)
            with self._lock:
                self.pages += 1
        return progress

    def _scan(self, segment: int, start: Wire | None) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "TableName": self._plan.table,
            "Segment": segment,
            "TotalSegments": self._plan.total_segments,
            "Limit": self._plan.page_size,
            **scan_filter(self._plan.migration),
        }
        if start is not None:
            kwargs["ExclusiveStartKey"] = start
        page: dict[str, Any] = dict(self._client.scan(**kwargs))
        return page

    def _migrate(self, raw: Wire, counts: Counts) -> None:
        """One item: exactly one of changed, unchanged, already, gone or failed; each refused write a conflict."""
        current: Wire | None = raw
        for _ in range(MAX_ATTEMPTS):
            outcome: Outcome = "gone" if current is None else self._attempt(current)
            if outcome != "conflict":
                setattr(counts, outcome, getattr(counts, outcome) + 1)
                return
            counts.conflicts += 1
            current = self._read(raw)
        logger.warning("an item kept changing under the migration", extra=_where(self._plan.migration, raw))
        counts.failed += 1

    def _attempt(self, current: Wire) -> Outcome:
        migration = self._plan.migration
        item = codec.from_item(current)
        if item_version(item) >= migration.to_version or not migration.items.matches(item):
            return "already"
        try:
            new = migration.migrate(item, self._read_plain)
        except Exception as exc:  # one bad item fails itself, not the run; the migration stays incomplete
            logger.warning("the migration failed on an item", extra={**_where(migration, current), "reason": repr(exc)})
            return "failed"
        if new is None:
            return "unchanged"
        if self._plan.dry_run:
            return "changed"
        stamped = codec.to_item({**new, SCHEMA_VERSION: migration.to_version})
        return "changed" if self._put(current, stamped) else "conflict"

    def _put(self, read: Wire, new: Wire) -> bool:
        self._budget.spend(write_units(read, new))
        try:
            self._client.put_item(
                TableName=self._plan.table, Item=new, **write_condition(read, self._plan.migration.guard)
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def _read_plain(self, key: dict[str, Any]) -> dict[str, Any] | None:
        """The item at ``key`` (plain values), strongly consistent: what a migration reads beside an item."""
        resp = self._client.get_item(TableName=self._plan.table, Key=codec.to_item(key), ConsistentRead=True)
        found = resp.get("Item")
        return codec.from_item(found) if found is not None else None

    def _read(self, item: Wire) -> Wire | None:
        resp = self._client.get_item(
            TableName=self._plan.table, Key={"PK": item["PK"], "SK": item["SK"]}, ConsistentRead=True
        )
        found: Wire | None = resp.get("Item")
        return found


def _where(migration: Migration, item: Wire) -> dict[str, Any]:
    return {"migration": migration.label, "pk": item.get("PK", {}).get("S"), "sk": item.get("SK", {}).get("S")}
