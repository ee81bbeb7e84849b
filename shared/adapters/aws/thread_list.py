"""A user's threads, most recently updated first: one Query of the thread-list index (``GSI3``).

Why an index of its own: thread items used to sit in ``GSI1``, which projects whole items (runs and memories need
that), so every change of a thread item (its message counter on each append, its claim) was also an index write,
and each append moved the item's sort key besides: 7 to 13 index write units a turn (docs/scaling.md §3.6). The
thread-list index projects only what the list returns (``table_schema.THREAD_LIST_ATTRIBUTES``), and only the
release at a run's end moves its sort key: one move a turn (a delete and a put of a small entry, 2 write units).

**Migration window.** Migration 2 (``shared.migrations.thread_list_index``) moves thread items written before this
release from ``GSI1`` to this index; the claim moves any thread a run touches (``open_and_claim``). Until the
migration is recorded as completed (``list_complete``), a listing reads both indexes and merges them by their
common sort key (``{updated_at}#{thread}``); after it, this index alone. The cursor is the last sort key returned,
so it pages the same way through one index or two; a cursor of the release before (``GSI1``'s
``ExclusiveStartKey``) is still honoured.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Awaitable, Callable
from typing import Any

from shared.adapters.aws import dynamo_codec as codec
from shared.adapters.aws.table_adapter import TableAdapter
from shared.adapters.aws.table_schema import THREAD_LIST_INDEX
from shared.errors import InvalidRequest
from shared.models import Identity, Thread
from shared.thread_search import ThreadCriteria, decode_cursor, encode_cursor, walk

_OLD_INDEX = ("GSI1", "GSI1PK", "GSI1SK")
_INDEX = (THREAD_LIST_INDEX, "GSI3PK", "GSI3SK")


class ThreadList:
    """The listing of ``threads`` (the threads adapter: its client, table and request count). ``list_complete``:
    whether migration 2 has completed (every thread in the index); None: the table never held the old shape."""

    def __init__(self, threads: TableAdapter, list_complete: Callable[[], Awaitable[bool]] | None) -> None:
        self._threads = threads
        self._list_complete = list_complete

    async def list_threads(
        self, identity: Identity, *, limit: int, cursor: str | None
    ) -> tuple[list[Thread], str | None]:
        partition = codec.user_threads_gsi(identity.tenant_id, identity.user_id)
        before = _decode_cursor(cursor, partition) if cursor else None
        indexes = [_INDEX]
        if self._list_complete is not None and not await self._list_complete():
            indexes.append(_OLD_INDEX)  # OLD-SHAPE READER: goes with the release after migration 2 completed
        pages = await asyncio.gather(*(self._page(index, partition, before, limit) for index in indexes))
        unique = dict(entry for page in pages for entry in page)  # one entry per sort key
        chosen = sorted(unique.items(), key=lambda entry: entry[0], reverse=True)[:limit]
        threads = _distinct([codec.thread_from_item(item) for _, item in chosen])
        more = len(chosen) == limit and any(len(page) == limit for page in pages)
        next_cursor = _encode_cursor(partition, chosen[-1][0]) if more else None
        return threads, next_cursor

    async def search_threads(
        self, identity: Identity, criteria: ThreadCriteria, *, limit: int, cursor: str | None
    ) -> tuple[list[Thread], str | None]:
        """The caller's threads matching ``criteria`` (``thread_search.walk``): Queries of their partition of this
        index (and of the old one during the migration window), a batch at a time; no scan, no other partition."""
        partition = codec.user_threads_gsi(identity.tenant_id, identity.user_id)
        start = decode_cursor(cursor, partition, criteria) if cursor else None
        both = self._list_complete is not None and not await self._list_complete()
        indexes = [_INDEX, _OLD_INDEX] if both else [_INDEX]  # OLD-SHAPE READER (see list_threads)

        async def fetch(before: str | None, n: int) -> tuple[list[tuple[str, Thread]], bool]:
            pages = await asyncio.gather(*(self._page(index, partition, before, n) for index in indexes))
            unique = dict(entry for page in pages for entry in page)
            chosen = sorted(unique.items(), key=lambda entry: entry[0], reverse=True)[:n]
            more = any(len(page) == n for page in pages)
            return [(key, codec.thread_from_item(item)) for key, item in chosen], more

        threads, position = await walk(fetch, criteria, limit=limit, start=start)
        return _distinct(threads), encode_cursor(partition, position) if position else None

    async def _page(
        self, index: tuple[str, str, str], partition: str, before: str | None, limit: int
    ) -> list[tuple[str, dict[str, Any]]]:
        """Up to ``limit`` entries of ``index`` in ``partition`` with a sort key below ``before``, newest first."""
        name, pk, sk = index
        condition = f"{pk} = :pk" + (f" AND {sk} < :before" if before is not None else "")
        values = {":pk": partition, **({":before": before} if before is not None else {})}
        resp = await self._threads._call(
            lambda: self._threads.client.query(
                TableName=self._threads.table_name,
                IndexName=name,
                KeyConditionExpression=condition,
                ExpressionAttributeValues=codec.to_item(values),
                ScanIndexForward=False,
                Limit=limit,
            )
        )
        return [(str(item[sk]["S"]), item) for item in resp.get("Items", [])]


def _distinct(threads: list[Thread]) -> list[Thread]:
    """Each thread once (in both indexes for a moment while the migration moves it), at its newest position."""
    seen: set[str] = set()
    out: list[Thread] = []
    for thread in threads:
        if thread.thread_id not in seen:
            seen.add(thread.thread_id)
            out.append(thread)
    return out


def _encode_cursor(partition: str, sort_key: str) -> str:
    return base64.urlsafe_b64encode(json.dumps({"p": partition, "before": sort_key}).encode()).decode()


def _decode_cursor(cursor: str, partition: str) -> str:
    """The sort key a page continues below. A cursor is opaque but client-held: exactly the expected fields, as
    strings, in the caller's own partition; anything else is refused before DynamoDB sees it. A cursor of the
    release before (``GSI1``'s ``ExclusiveStartKey``) continues below its ``GSI1SK``."""
    try:
        value = json.loads(base64.urlsafe_b64decode(cursor.encode()))
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidRequest("malformed cursor", code="invalid_cursor") from exc
    if isinstance(value, dict) and set(value) == {"p", "before"}:
        if value["p"] == partition and isinstance(value["before"], str):
            return value["before"]
    elif isinstance(value, dict) and set(value) == {"PK", "SK", "GSI1PK", "GSI1SK"}:
        strings = all(isinstance(v, dict) and set(v) == {"S"} and isinstance(v["S"], str) for v in value.values())
        if strings and value["GSI1PK"]["S"] == partition:
            return str(value["GSI1SK"]["S"])
    raise InvalidRequest("malformed cursor", code="invalid_cursor")
