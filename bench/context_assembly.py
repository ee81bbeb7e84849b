"""Store requests and read capacity to assemble the context window, by thread length:
``python -m bench.context_assembly``.

Threads of 100, 1,000, 10,000 and 100,000 messages are written to a moto DynamoDB table (``batch_write_item``
of the adapter's own item encoding, 25 per request, which is much faster than appending through the store's
transactions), then :func:`shared.context_window.resolve_window` reads each one through the real
:class:`~shared.adapters.aws.dynamodb_store.DynamoDBStore` for every history policy.

Counting, not timing:

- **requests**: ``WindowResult.store_requests``, checked against ``DynamoDBStore.request_count`` and against a
  botocore ``after-call`` hook on the client that counts the ``Query`` calls actually sent.
- **read capacity**: DynamoDB bills a ``Query`` by the summed size of the items it read, rounded up to 4 KB: one
  RCU per 4 KB with ``ConsistentRead`` (the adapter's setting), half without. moto reports a constant per request,
  so the RCU column is **computed from the item sizes** (DynamoDB's published size rules: attribute names plus
  values) of the items each ``Query`` returned, captured by the same hook. The hook also injects
  ``ReturnConsumedCapacity=TOTAL`` so moto's figure is shown beside it, for what it is worth.

Every thread has the same last messages (the turn pattern is laid out from the end), and only the last 60
messages are dated today, so every policy's window is the same for every length: the counts must be identical.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import boto3
from moto import mock_aws

from bench.stats import machine, markdown_table
from shared.adapters.aws import dynamo_codec as codec
from shared.adapters.aws.dynamodb_store import DynamoDBStore
from shared.adapters.aws.table_schema import create_table
from shared.context_window import resolve_window
from shared.models import Message, Role, ToolCall
from shared.profiles import HistoryPolicy

TABLE = "bench-context"
TENANT = "tenant-bench"
REGION = "us-east-1"
NOW = datetime(2025, 3, 10, 12, 0, tzinfo=UTC)
RECENT = 60
"""How many of the newest messages are dated today (the rest are a week old)."""
SIZES = (100, 1_000, 10_000, 100_000)

POLICIES: dict[str, HistoryPolicy] = {
    "last_n N=20": HistoryPolicy(n=20),
    "last_n N=25": HistoryPolicy(n=25),
    "blocked N=20 B=20": HistoryPolicy(n=20, block_size=20),
    "today_yesterday": HistoryPolicy(mode="today_yesterday"),
}

# The turn pattern, newest message first: three plain turns and one with a tool call (2.5 messages a turn).
_PATTERN: tuple[Role, ...] = (
    Role.ASSISTANT, Role.USER,
    Role.ASSISTANT, Role.USER,
    Role.ASSISTANT, Role.TOOL, Role.ASSISTANT, Role.USER,
    Role.ASSISTANT, Role.USER,
)  # fmt: skip
_SIZES = {Role.USER: 200, Role.ASSISTANT: 800, Role.TOOL: 300}


def thread_messages(thread_id: str, length: int) -> list[Message]:
    """``length`` messages whose tail is the same whatever the length (the pattern is laid out from the end)."""
    out: list[Message] = []
    for seq in range(1, length + 1):
        back = length - seq  # 0 for the newest message
        role = _PATTERN[back % len(_PATTERN)]
        at = NOW - timedelta(minutes=back) if back < RECENT else NOW - timedelta(days=7, minutes=back)
        fields: dict[str, Any] = {}
        if role is Role.TOOL:
            fields["tool_call_id"] = f"call-{seq}"
        elif role is Role.ASSISTANT and back + 1 < length and _PATTERN[(back - 1) % len(_PATTERN)] is Role.TOOL:
            fields["tool_calls"] = (ToolCall(id=f"call-{seq + 1}", name="get_current_time"),)
        content = ("x" * _SIZES[role]) if not fields.get("tool_calls") else ""
        out.append(
            Message(id=f"m{seq}", thread_id=thread_id, role=role, content=content, seq=seq, created_at=at, **fields)
        )
    return out


def item_size(item: dict[str, Any]) -> int:
    """DynamoDB's item size: attribute name lengths plus value sizes (strings and binaries by their bytes,
    numbers about one byte per two digits plus one, 3 bytes plus one per element for maps and lists)."""
    return sum(len(name.encode()) + _value_size(value) for name, value in item.items())


def _value_size(value: dict[str, Any]) -> int:
    ((kind, inner),) = value.items()
    if kind == "S":
        return len(str(inner).encode())
    if kind == "N":
        digits = len(str(Decimal(str(inner))).replace("-", "").replace(".", "").lstrip("0")) or 1
        return math.ceil(digits / 2) + 1
    if kind == "B":
        return len(inner)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "M":
        return 3 + sum(len(k.encode()) + _value_size(v) + 1 for k, v in inner.items())
    if kind == "L":
        return 3 + sum(_value_size(v) + 1 for v in inner)
    return sum(len(str(v).encode()) for v in inner)  # SS, NS, BS


@dataclass
class QueryMeter:
    """A botocore hook pair: asks for consumed capacity and counts Query calls, items and their sizes."""

    queries: int = 0
    items: int = 0
    rcu_computed: float = 0.0
    rcu_reported: float = 0.0
    consistent: list[bool] = field(default_factory=list)

    def install(self, client: Any) -> None:
        client.meta.events.register("provide-client-params.dynamodb.Query", self._before)
        client.meta.events.register("after-call.dynamodb.Query", self._after)

    def _before(self, params: dict[str, Any], **_: Any) -> None:
        params["ReturnConsumedCapacity"] = "TOTAL"
        self.consistent.append(bool(params.get("ConsistentRead")))

    def _after(self, parsed: dict[str, Any], **_: Any) -> None:
        self.queries += 1
        items = parsed.get("Items", [])
        self.items += len(items)
        size = sum(item_size(i) for i in items)
        units = max(1, math.ceil(size / 4096))
        self.rcu_computed += units * (1.0 if self.consistent[-1] else 0.5)
        self.rcu_reported += float((parsed.get("ConsumedCapacity") or {}).get("CapacityUnits", 0.0))

    def reset(self) -> None:
        self.queries = self.items = 0
        self.rcu_computed = self.rcu_reported = 0.0
        self.consistent.clear()


@dataclass
class Row:
    size: int
    policy: str
    window_messages: int
    store_requests: int
    adapter_requests: int
    queries_sent: int
    items_read: int
    rcu_computed: float
    rcu_moto: float


def write_thread(client: Any, thread_id: str, length: int) -> None:
    items = [codec.message_to_item(TENANT, m) for m in thread_messages(thread_id, length)]
    meta = codec.to_item(
        {
            "PK": codec.thread_pk(TENANT, thread_id),
            "SK": codec.META,
            "kind": "thread",
            "tenant_id": TENANT,
            "thread_id": thread_id,
            "owner_user_id": "user-bench",
            "created_at": NOW.isoformat(),
            "updated_at": NOW.isoformat(),
            "last_seq": length,
        }
    )
    items.append(meta)
    for start in range(0, len(items), 25):
        batch = [{"PutRequest": {"Item": item}} for item in items[start : start + 25]]
        client.batch_write_item(RequestItems={TABLE: batch})


async def measure(sizes: Sequence[int], policies: dict[str, HistoryPolicy], page_size: int) -> list[Row]:
    rows: list[Row] = []
    with mock_aws():
        client = boto3.client("dynamodb", region_name=REGION)
        create_table(client, TABLE)
        meter = QueryMeter()
        meter.install(client)
        store = DynamoDBStore(TABLE, lambda: client)
        for size in sizes:
            thread_id = f"thread-{size}"
            write_thread(client, thread_id, size)
            for name, policy in policies.items():
                meter.reset()
                before = store.request_count
                window = await resolve_window(store.threads, TENANT, thread_id, policy, now=NOW, page_size=page_size)
                rows.append(
                    Row(
                        size=size,
                        policy=name,
                        window_messages=len(window.messages),
                        store_requests=window.store_requests,
                        adapter_requests=store.request_count - before,
                        queries_sent=meter.queries,
                        items_read=meter.items,
                        rcu_computed=meter.rcu_computed,
                        rcu_moto=meter.rcu_reported,
                    )
                )
    return rows


def flat(rows: Sequence[Row]) -> dict[str, bool]:
    """Per policy: are the request counts (and RCUs) identical across thread lengths?"""
    out: dict[str, bool] = {}
    for name in dict.fromkeys(r.policy for r in rows):
        mine = [r for r in rows if r.policy == name]
        out[name] = (
            len({(r.store_requests, r.adapter_requests, r.queries_sent, r.items_read, r.rcu_computed) for r in mine})
            == 1
        )
    return out


def main(argv: Sequence[str] | None = None) -> list[Row]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="threads of 100 and 1,000 messages only")
    parser.add_argument("--sizes", default=",".join(str(s) for s in SIZES))
    parser.add_argument("--page-size", type=int, default=50, help="messages per store request (the worker's 50)")
    args = parser.parse_args(argv)
    for name, value in {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench"}.items():
        os.environ.setdefault(name, value)
    sizes = (100, 1_000) if args.smoke else tuple(int(s) for s in args.sizes.split(","))
    started = time.perf_counter()
    rows = asyncio.run(measure(sizes, POLICIES, args.page_size))
    print(f"machine: {machine()}; moto in-process; page size {args.page_size}")
    print()
    print(
        markdown_table(
            ["thread messages", "policy", "window messages", "store requests", "adapter requests",
             "Query calls sent", "items read", "RCU (computed, consistent)", "RCU (moto's constant)"],
            [
                [r.size, r.policy, r.window_messages, r.store_requests, r.adapter_requests, r.queries_sent,
                 r.items_read, r.rcu_computed, r.rcu_moto]
                for r in rows
            ],
        )
    )
    print()
    verdict = flat(rows)
    for name, same in verdict.items():
        print(f"{name}: {'identical' if same else 'DIFFERENT'} across {len(sizes)} thread lengths")
    print(f"({time.perf_counter() - started:.1f} s)")
    return rows


if __name__ == "__main__":
    main()
