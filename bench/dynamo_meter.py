"""Read and write request units of every DynamoDB call a process makes, computed from item sizes as DynamoDB bills.

moto answers ``ReturnConsumedCapacity`` with a constant per request (``bench/context_assembly.py`` shows it), so the
units are computed instead, from the requests the adapters send and the items they touch. A pair of botocore hooks,
registered on a boto3 session before any client is made from it, sees every call: ``provide-client-params`` reads
the items a write will change (their size before), ``after-call`` reads them again (their size after) and the items
a read returned. The reads go to the same in-process moto through a client of a separate session, so they are
neither metered nor serialised twice (they run inside the metered call, which already holds moto's lock).

The rules applied (DynamoDB's published capacity rules, "Read and write request units"):

- **reads**: ``GetItem`` one unit per 4 KB of the item, rounded up, at least one even when there is no item;
  ``BatchGetItem`` the same for each key on its own; ``Query`` the summed size of the items read, rounded up to
  4 KB once per request (at least one). Half of that when the read is eventually consistent (every index read).
- **writes**: one unit per 1 KB, rounded up, of the larger of the item before and after (at least one, also when
  a condition fails); twice that inside ``TransactWriteItems``. Each global secondary index the write changes costs
  its own writes, one per 1 KB of the projected entry: a put when the item enters the index, a delete when it leaves,
  both when its index key changes, one when only projected attributes change (charged at the plain rate, also for a
  transaction: an assumption, the published rules do not say).
- item size: attribute names plus values (:func:`bench.context_assembly.item_size`).

Units are also kept per partition (the table's or index's partition key value), so a run can say how much of its
load one partition takes. ``pattern`` turns a key into its kind (``T#*#TH#*``: a thread) by hiding the ids.
"""

from __future__ import annotations

import math
import re
import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from bench.context_assembly import item_size

READ_UNIT = 4096
WRITE_UNIT = 1024
ITEM_OVERHEAD = 100
"""Bytes DynamoDB adds to each stored item (and each index entry) for storage billing."""

_TAG = re.compile(r"^[A-Z]+$")


def pattern(partition_key: str) -> str:
    """The kind of a partition: ids hidden, tags kept (``T#t1#TH#th-9`` -> ``T#*#TH#*``, ``RUNNING#3`` ->
    ``RUNNING#*``)."""
    return "#".join(part if _TAG.match(part) else "*" for part in partition_key.split("#"))


@dataclass(frozen=True)
class Index:
    name: str
    hash_key: str
    range_key: str | None
    projection: str  # ALL | KEYS_ONLY | INCLUDE
    included: tuple[str, ...] = ()


@dataclass(frozen=True)
class TableShape:
    name: str
    hash_key: str
    range_key: str | None
    indexes: tuple[Index, ...] = ()

    @property
    def key_names(self) -> tuple[str, ...]:
        return (self.hash_key,) if self.range_key is None else (self.hash_key, self.range_key)

    def key_of(self, item: dict[str, Any]) -> dict[str, Any]:
        return {name: item[name] for name in self.key_names}


def describe(client: Any, table: str) -> TableShape:
    """The key schema and indexes of ``table``, as the meter needs them."""
    desc = client.describe_table(TableName=table)["Table"]

    def keys(schema: list[dict[str, str]]) -> tuple[str, str | None]:
        hash_key = next(k["AttributeName"] for k in schema if k["KeyType"] == "HASH")
        range_key = next((k["AttributeName"] for k in schema if k["KeyType"] == "RANGE"), None)
        return hash_key, range_key

    hash_key, range_key = keys(desc["KeySchema"])
    indexes = []
    for gsi in desc.get("GlobalSecondaryIndexes", []):
        ih, ir = keys(gsi["KeySchema"])
        projection = gsi.get("Projection", {})
        indexes.append(
            Index(gsi["IndexName"], ih, ir, projection.get("ProjectionType", "ALL"),
                  tuple(projection.get("NonKeyAttributes", ())))
        )
    return TableShape(table, hash_key, range_key, tuple(indexes))


@dataclass
class DynamoTally:
    """What the metered calls cost; ``+``/``-`` combine tallies (for per-phase deltas)."""

    requests: Counter[str] = field(default_factory=Counter)
    """Calls sent, by operation (``TransactWriteItems`` counts once)."""
    rru: float = 0.0
    wru: float = 0.0
    index_wru: float = 0.0
    """Of ``wru``: the global secondary index writes."""
    stored_bytes: int = 0
    """Change in stored bytes (items and index entries, with DynamoDB's 100 bytes of overhead each)."""
    units_by_pattern: Units = field(default_factory=dict)
    """Read plus write units, by partition kind (``table:pattern`` or ``table/index:pattern``)."""
    units_by_partition: Units = field(default_factory=dict)
    """Read plus write units by partition key (for the hottest partition of a phase)."""
    units_by_op: Units = field(default_factory=dict)
    """Read plus write units by operation (``BatchGetItem``, ``TransactWriteItems``...)."""

    def copy(self) -> DynamoTally:
        return DynamoTally(
            Counter(self.requests), self.rru, self.wru, self.index_wru, self.stored_bytes,
            dict(self.units_by_pattern), dict(self.units_by_partition), dict(self.units_by_op),
        )

    def plus(self, other: DynamoTally, sign: int = 1) -> DynamoTally:
        requests = self.requests + other.requests if sign > 0 else self.requests - other.requests
        return DynamoTally(
            requests,
            self.rru + sign * other.rru,
            self.wru + sign * other.wru,
            self.index_wru + sign * other.index_wru,
            self.stored_bytes + sign * other.stored_bytes,
            combine(self.units_by_pattern, other.units_by_pattern, sign),
            combine(self.units_by_partition, other.units_by_partition, sign),
            combine(self.units_by_op, other.units_by_op, sign),
        )

    def minus(self, earlier: DynamoTally) -> DynamoTally:
        return self.plus(earlier, -1)

    @property
    def hottest(self) -> tuple[str, float]:
        """The partition kind with the most units on a single key, and those units."""
        if not self.units_by_partition:
            return ("", 0.0)
        key, units = max(self.units_by_partition.items(), key=lambda item: item[1])
        table, _, partition = key.partition(":")
        return f"{table}:{pattern(partition)}", units


Units = dict[str, float]


def combine(a: Units, b: Units, sign: int = 1) -> Units:
    """``a + sign * b``, key by key, zeros dropped."""
    out = dict(a)
    for key, value in b.items():
        out[key] = out.get(key, 0.0) + sign * value
    return {key: value for key, value in out.items() if value}


def _bump(units: Units, key: str, value: float) -> None:
    units[key] = units.get(key, 0.0) + value


_WRITES = {"PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem"}


class DynamoMeter:
    """Computes units for every DynamoDB call of the clients made from the session it is installed on."""

    def __init__(self, reader: Any, tables: Iterable[TableShape]) -> None:
        self._reader = reader
        self._tables = {t.name: t for t in tables}
        self._local = threading.local()
        self._lock = threading.Lock()
        self.tally = DynamoTally()
        self.enabled = True

    def install(self, events: Any) -> None:
        """Register on a botocore event emitter (``boto3.Session().events``), before its clients are made."""
        events.register("provide-client-params.dynamodb", self._before)
        events.register("after-call.dynamodb", self._after)

    def snapshot(self) -> DynamoTally:
        with self._lock:
            return self.tally.copy()

    # ---- hooks -----------------------------------------------------------------------------------------------

    def _before(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        op = model.name
        writes = self._write_targets(op, params) if op in _WRITES and self.enabled else []
        before = [(table, key, self._read(table, key)) for table, key in writes]
        self._local.pending = (op, dict(params), before)

    def _after(self, parsed: dict[str, Any], model: Any, **_: Any) -> None:
        pending = getattr(self._local, "pending", None)
        self._local.pending = None
        if pending is None or pending[0] != model.name or not self.enabled:
            return
        op, params, before = pending
        self._local.op = op
        with self._lock:
            self.tally.requests[op] += 1
        if op in _WRITES:
            factor = 2.0 if op == "TransactWriteItems" else 1.0
            for table, key, old in before:
                self._charge_write(table, key, old, self._read(table, key), factor)
        elif op == "GetItem":
            self._charge_get(params["TableName"], params["Key"], parsed.get("Item"), params)
        elif op == "BatchGetItem":
            self._charge_batch_get(params, parsed)
        elif op in ("Query", "Scan"):
            self._charge_query(params, parsed)
        elif op == "TransactGetItems":
            for entry, response in zip(params["TransactItems"], parsed.get("Responses", []), strict=False):
                get = entry["Get"]
                self._charge_get(get["TableName"], get["Key"], response.get("Item"), {"ConsistentRead": True}, 2.0)

    # ---- reads -----------------------------------------------------------------------------------------------

    def _charge_get(
        self, table: str, key: dict[str, Any], item: dict[str, Any] | None, params: dict[str, Any],
        factor: float = 1.0,
    ) -> None:
        size = item_size(item) if item else 0
        units = max(1, math.ceil(size / READ_UNIT)) * _consistency(params) * factor
        self._add_read(table, None, _hash_value(self._tables.get(table), key), units)

    def _charge_batch_get(self, params: dict[str, Any], parsed: dict[str, Any]) -> None:
        for table, request in params["RequestItems"].items():
            shape = self._tables.get(table)
            found = {
                _key_tuple(shape.key_of(item)): item for item in parsed.get("Responses", {}).get(table, [])
            } if shape else {}
            for key in request["Keys"]:
                self._charge_get(table, key, found.get(_key_tuple(key)), request)

    def _charge_query(self, params: dict[str, Any], parsed: dict[str, Any]) -> None:
        table, index = params["TableName"], params.get("IndexName")
        items = parsed.get("Items", [])
        size = sum(item_size(i) for i in items)
        count, scanned = int(parsed.get("Count", len(items))), int(parsed.get("ScannedCount", len(items)))
        if count and scanned > count:  # a filter dropped items after they were read: charge them at the mean size
            size = math.ceil(size * scanned / count)
        units = max(1, math.ceil(size / READ_UNIT)) * (0.5 if index else _consistency(params))
        values = params.get("ExpressionAttributeValues", {})
        partition = next((v.get("S", "") for k, v in values.items() if k in (":pk", ":p", ":gpk")), "")
        self._add_read(table, index, partition or "?", units)

    def _add_read(self, table: str, index: str | None, partition: str, units: float) -> None:
        where = f"{table}/{index}" if index else table
        with self._lock:
            self.tally.rru += units
            _bump(self.tally.units_by_pattern, f"{where}:{pattern(partition)}", units)
            _bump(self.tally.units_by_partition, f"{where}:{partition}", units)
            _bump(self.tally.units_by_op, self._local.op, units)

    # ---- writes ----------------------------------------------------------------------------------------------

    def _write_targets(self, op: str, params: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        out: list[tuple[str, dict[str, Any]]] = []
        if op == "PutItem":
            out.append((params["TableName"], self._tables[params["TableName"]].key_of(params["Item"])))
        elif op in ("UpdateItem", "DeleteItem"):
            out.append((params["TableName"], params["Key"]))
        elif op == "TransactWriteItems":
            for entry in params["TransactItems"]:
                ((kind, body),) = entry.items()
                if kind == "Put":
                    out.append((body["TableName"], self._tables[body["TableName"]].key_of(body["Item"])))
                elif kind in ("Update", "Delete", "ConditionCheck"):
                    out.append((body["TableName"], body["Key"]))
        elif op == "BatchWriteItem":
            for table, requests in params["RequestItems"].items():
                for request in requests:
                    if "PutRequest" in request:
                        out.append((table, self._tables[table].key_of(request["PutRequest"]["Item"])))
                    else:
                        out.append((table, request["DeleteRequest"]["Key"]))
        return out

    def _charge_write(
        self, table: str, key: dict[str, Any], old: dict[str, Any] | None, new: dict[str, Any] | None, factor: float
    ) -> None:
        shape = self._tables[table]
        old_size, new_size = (item_size(old) if old else 0), (item_size(new) if new else 0)
        units = max(1, math.ceil(max(old_size, new_size) / WRITE_UNIT)) * factor
        stored = _stored(new_size) - _stored(old_size)
        partition = _hash_value(shape, key)
        charges = [(f"{table}:{partition}", units)]
        for index in shape.indexes:
            before, after = _entry(index, shape, old), _entry(index, shape, new)
            stored += _stored(item_size(after) if after else 0) - _stored(item_size(before) if before else 0)
            for entry in _index_writes(index, before, after):
                charges.append((f"{table}/{index.name}:{entry[index.hash_key]['S']}",
                                float(max(1, math.ceil(item_size(entry) / WRITE_UNIT)))))
        with self._lock:
            self.tally.stored_bytes += stored
            for where, charged in charges:
                self.tally.wru += charged
                if "/" in where.partition(":")[0]:
                    self.tally.index_wru += charged
                place, _, value = where.partition(":")
                _bump(self.tally.units_by_pattern, f"{place}:{pattern(value)}", charged)
                _bump(self.tally.units_by_partition, where, charged)
                _bump(self.tally.units_by_op, self._local.op, charged)

    def _read(self, table: str, key: dict[str, Any]) -> dict[str, Any] | None:
        item: dict[str, Any] | None = self._reader.get_item(TableName=table, Key=key, ConsistentRead=True).get("Item")
        return item


def _consistency(params: dict[str, Any]) -> float:
    return 1.0 if params.get("ConsistentRead") else 0.5


def _hash_value(shape: TableShape | None, key: dict[str, Any]) -> str:
    if shape is None:
        return "?"
    value = key.get(shape.hash_key, {})
    return str(value.get("S", value.get("N", "?")))


def _key_tuple(key: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((name, str(value)) for name, value in key.items()))


def _stored(size: int) -> int:
    return size + ITEM_OVERHEAD if size else 0


def _entry(index: Index, shape: TableShape, item: dict[str, Any] | None) -> dict[str, Any] | None:
    """The index entry ``item`` projects into ``index``, or None when the item lacks the index's keys."""
    if item is None or index.hash_key not in item or (index.range_key and index.range_key not in item):
        return None
    if index.projection == "ALL":
        return item
    names = {*shape.key_names, index.hash_key, *((index.range_key,) if index.range_key else ()), *index.included}
    return {name: value for name, value in item.items() if name in names}


def _index_writes(index: Index, before: dict[str, Any] | None, after: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The index entries written: a put, a delete, both (the index key changed), or one update."""
    if (before is None and after is None) or before == after:
        return []
    if before is None:
        return [after] if after else []
    if after is None:
        return [before]
    keys = (index.hash_key, index.range_key)
    if any(name and before.get(name) != after.get(name) for name in keys):
        return [before, after]
    return [after]
