"""The threads adapter's reads of messages: pages of a thread backwards and forwards (one strongly consistent
``Query`` each), and lookups by id: which ids a thread holds (their id markers), and the stored messages of ids (the
markers, then the bodies by number), strongly consistent ``BatchGetItem`` calls, 100 keys a call, unprocessed keys
asked again. A message of another thread or tenant has no marker in the partition. The ids of one run's messages:
pages forward from its first message, filtered on its id."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from shared.adapters.aws import dynamo_codec as codec
from shared.adapters.aws.table_adapter import TableAdapter
from shared.models import Message
from shared.ports.threads import RunMessageIds

RUN_MESSAGES_PAGE = 200
"""Messages read per request when looking for a run's messages (``run_message_ids``)."""


async def known_message_ids(threads: TableAdapter, tenant_id: str, thread_id: str, ids: Sequence[str]) -> set[str]:
    pk = codec.thread_pk(tenant_id, thread_id)
    markers = await _batch_get(threads, [{"PK": pk, "SK": codec.msg_id_sk(mid)} for mid in dict.fromkeys(ids)])
    return {codec.from_item(item)["SK"].removeprefix("MID#") for item in markers}


async def stored_messages(threads: TableAdapter, tenant_id: str, thread_id: str, ids: Sequence[str]) -> list[Message]:
    pk = codec.thread_pk(tenant_id, thread_id)
    markers = await _batch_get(threads, [{"PK": pk, "SK": codec.msg_id_sk(mid)} for mid in dict.fromkeys(ids)])
    seqs = [int(codec.from_item(marker)["seq"]) for marker in markers]
    bodies = await _batch_get(threads, [{"PK": pk, "SK": codec.msg_sk(seq)} for seq in seqs])
    return [codec.message_from_item(item) for item in bodies]


async def _batch_get(threads: TableAdapter, keys: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The items of ``keys`` that exist, as stored (not decoded)."""
    table = threads.table_name
    found: list[dict[str, Any]] = []
    for start in range(0, len(keys), 100):
        chunk = [codec.to_item(key) for key in keys[start : start + 100]]
        request: dict[str, Any] = {table: {"Keys": chunk, "ConsistentRead": True}}
        while request:
            resp = await threads._call(lambda req=request: threads.client.batch_get_item(RequestItems=req))  # type: ignore[misc]
            found += resp.get("Responses", {}).get(table, [])
            request = resp.get("UnprocessedKeys") or {}
    return found


async def read_back(
    threads: TableAdapter, tenant_id: str, thread_id: str, *, before_seq: int | None, limit: int
) -> list[Message]:
    if before_seq is not None and before_seq <= 1:
        return []
    # The upper bound excludes ``before_seq`` itself, so a page never reads an item it will not return.
    upper = codec.msg_sk(before_seq - 1) if before_seq is not None else "M#~"
    resp = await threads._call(
        lambda: threads.client.query(
            TableName=threads.table_name,
            KeyConditionExpression="PK = :pk AND SK BETWEEN :lo AND :hi",
            ExpressionAttributeValues=codec.to_item(
                {":pk": codec.thread_pk(tenant_id, thread_id), ":lo": "M#", ":hi": upper}
            ),
            ScanIndexForward=False,
            Limit=limit,
            ConsistentRead=True,
        )
    )
    return [codec.message_from_item(i) for i in resp.get("Items", [])]


async def read_forward(
    threads: TableAdapter, tenant_id: str, thread_id: str, *, after_seq: int, limit: int
) -> list[Message]:
    resp = await threads._call(
        lambda: threads.client.query(
            TableName=threads.table_name,
            KeyConditionExpression="PK = :pk AND SK BETWEEN :lo AND :hi",
            ExpressionAttributeValues=codec.to_item(
                {":pk": codec.thread_pk(tenant_id, thread_id), ":lo": codec.msg_sk(after_seq + 1), ":hi": "M#~"}
            ),
            ScanIndexForward=True,
            Limit=limit,
            ConsistentRead=True,
        )
    )
    return [codec.message_from_item(i) for i in resp.get("Items", [])]


async def run_message_ids(
    threads: TableAdapter, tenant_id: str, thread_id: str, run_id: str, *, after_seq: int, scan_limit: int
) -> RunMessageIds:
    """Strongly consistent Queries of the thread's messages after ``after_seq``, filtered on the run's id and
    projected to the ids: ``RUN_MESSAGES_PAGE`` messages a request, ``scan_limit`` at most. A filter does not make a
    read cheaper (the capacity is that of every message read, projection or not), which is why the read starts at
    the run's first message: for the newest run of a thread it reads that run's messages and no other."""
    ids: list[str] = []
    kwargs: dict[str, Any] = {
        "TableName": threads.table_name,
        "KeyConditionExpression": "PK = :pk AND SK BETWEEN :lo AND :hi",
        "FilterExpression": "run_id = :r",
        "ProjectionExpression": "#id",
        "ExpressionAttributeNames": {"#id": "id"},
        "ExpressionAttributeValues": codec.to_item(
            {
                ":pk": codec.thread_pk(tenant_id, thread_id),
                ":lo": codec.msg_sk(after_seq + 1),
                ":hi": "M#~",
                ":r": run_id,
            }
        ),
        "ConsistentRead": True,
    }
    scanned = 0
    while scanned < scan_limit:
        page = {**kwargs, "Limit": min(RUN_MESSAGES_PAGE, scan_limit - scanned)}
        resp = await threads._call(lambda page=page: threads.client.query(**page))  # type: ignore[misc]
        scanned += int(resp.get("ScannedCount", 0))
        ids += [item["id"]["S"] for item in resp.get("Items", [])]
        last = resp.get("LastEvaluatedKey")
        if not last:
            return RunMessageIds(tuple(ids), complete=True)
        kwargs["ExclusiveStartKey"] = last
    return RunMessageIds(tuple(ids), complete=False)
