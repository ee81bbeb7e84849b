"""Feedback on an answer: on the answer's message item (``feedback``, JSON) for the history, and as a feedback item
of its own (``FB#{message}`` in the thread's partition) for the tenant's export.

On the message item, the history reads it with the message at no extra request. The feedback item is what the
export finds: it carries ``GSI1PK = T#{tenant}#FEEDBACK`` and ``GSI1SK = {given at}#{thread}#{message}``
(``shared.feedback_export.position``), so a tenant's feedback of a time range is one Query of ``GSI1``, never a scan;
and it is small (the feedback, the run, the profile and the model, never the answer's text), so the export reads
about 300 bytes per feedback whatever the answer's length. Both live in the thread's partition, so both go with the
thread (``DELETE /threads/{id}``, ``DELETE /me``) with nothing more to find.

Giving feedback: the thread's ownership read, the message's id marker (its seq), the message (an answer a user
sees, else ``not_an_answer``), the answer's run record (its model; ``answering_model``), and one transaction that
updates the message and puts the feedback item. Removing it: the same without the run, the transaction deleting
the item. One feedback per message: the thread's owner is its only user.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError

from shared.adapters.aws import dynamo_codec as codec
from shared.adapters.aws.runs import DynamoDBRunLedger
from shared.adapters.aws.table_adapter import TableAdapter
from shared.errors import NotFound
from shared.feedback_export import position, split_position, time_key
from shared.migrations.model import SCHEMA_VERSION
from shared.migrations.registry import current_version
from shared.models import Feedback, FeedbackEntry, Identity, Message, Thread, answering_model
from shared.thread_fields import check_answer

FEEDBACK_INDEX = "GSI1"


def feedback_gsi(tenant_id: str) -> str:
    return f"T#{tenant_id}#FEEDBACK"


def feedback_sk(message_id: str) -> str:
    return f"FB#{message_id}"


def _feedback_item(tenant_id: str, entry: FeedbackEntry) -> dict[str, Any]:
    return codec.to_item(
        {
            "PK": codec.thread_pk(tenant_id, entry.thread_id),
            "SK": feedback_sk(entry.message_id),
            "kind": "feedback",
            "thread_id": entry.thread_id,
            "message_id": entry.message_id,
            "feedback": entry.feedback.model_dump_json(),
            "run_id": entry.run_id,
            "execution_profile_name": entry.execution_profile_name,
            "model": entry.model,
            "GSI1PK": feedback_gsi(tenant_id),
            "GSI1SK": position(entry),
            SCHEMA_VERSION: current_version("feedback"),
        }
    )


def _entry_from_item(item: dict[str, Any]) -> FeedbackEntry:
    data = codec.from_item(item)
    return FeedbackEntry(
        thread_id=data["thread_id"],
        message_id=data["message_id"],
        feedback=Feedback.model_validate_json(data["feedback"]),
        run_id=data.get("run_id"),
        execution_profile_name=data["execution_profile_name"],
        model=data.get("model"),
    )


async def set_feedback(
    threads: TableAdapter,
    runs: DynamoDBRunLedger,
    get_thread: Callable[[Identity, str], Awaitable[Thread]],
    identity: Identity,
    thread_id: str,
    message_id: str,
    feedback: Feedback | None,
) -> Message:
    """``ThreadStore.set_feedback``: ``get_thread`` first (NotFound when the thread is not the caller's)."""
    await get_thread(identity, thread_id)
    pk = codec.thread_pk(identity.tenant_id, thread_id)
    table = threads.table_name
    marker = await threads._call(
        lambda: threads.client.get_item(
            TableName=table, Key=codec.to_item({"PK": pk, "SK": codec.msg_id_sk(message_id)})
        )
    )
    if "Item" not in marker:
        raise NotFound("message not found")
    key = codec.to_item({"PK": pk, "SK": codec.msg_sk(int(codec.from_item(marker["Item"])["seq"]))})
    found = await threads._call(lambda: threads.client.get_item(TableName=table, Key=key))
    if "Item" not in found:
        raise NotFound("message not found")
    message = codec.message_from_item(found["Item"])
    check_answer(message)
    # The message still exists when the transaction runs: a thread deleted meanwhile gets no orphan feedback item.
    update: dict[str, Any] = {"TableName": table, "Key": key, "ConditionExpression": "attribute_exists(PK)"}
    if feedback is None:
        update["UpdateExpression"] = "REMOVE feedback"
        second: dict[str, Any] = {
            "Delete": {"TableName": table, "Key": codec.to_item({"PK": pk, "SK": feedback_sk(message_id)})}
        }
    else:
        update["UpdateExpression"] = "SET feedback = :f"
        update["ExpressionAttributeValues"] = codec.to_item({":f": feedback.model_dump_json()})
        run = await runs.get_run(identity.tenant_id, message.run_id) if message.run_id else None
        entry = FeedbackEntry(
            thread_id=thread_id,
            message_id=message_id,
            feedback=feedback,
            run_id=message.run_id,
            execution_profile_name=message.meta.execution_profile_name,
            model=answering_model(run),
        )
        second = {"Put": {"TableName": table, "Item": _feedback_item(identity.tenant_id, entry)}}
    try:
        await threads._call(
            lambda: threads.client.transact_write_items(TransactItems=[{"Update": update}, second])  # type: ignore[list-item,typeddict-item]
        )
    except ClientError as exc:
        reasons = exc.response.get("CancellationReasons") or [{}]
        if reasons[0].get("Code") == "ConditionalCheckFailed":  # the thread was deleted meanwhile
            raise NotFound("message not found") from exc
        raise
    return message.model_copy(update={"feedback": feedback})


async def list_feedback(
    threads: TableAdapter, tenant_id: str, *, since: datetime, until: datetime, limit: int, after: str | None
) -> tuple[list[FeedbackEntry], str | None]:
    """``ThreadStore.list_feedback``: one Query of the tenant's partition of ``GSI1``, eventually consistent
    (feedback given a second ago may be missing; an export is of the past)."""
    query: dict[str, Any] = {
        "TableName": threads.table_name,
        "IndexName": FEEDBACK_INDEX,
        "KeyConditionExpression": "GSI1PK = :p AND GSI1SK BETWEEN :lo AND :hi",
        # A position is ``{time}#...``: ``{since}`` sorts before every entry given at ``since``, ``{until}`` before
        # every entry given at ``until`` (which the range leaves out).
        "ExpressionAttributeValues": codec.to_item(
            {":p": feedback_gsi(tenant_id), ":lo": time_key(since), ":hi": time_key(until)}
        ),
        "Limit": limit,
    }
    if after is not None:
        _, thread_id, message_id = split_position(after)
        query["ExclusiveStartKey"] = codec.to_item(
            {
                "PK": codec.thread_pk(tenant_id, thread_id),
                "SK": feedback_sk(message_id),
                "GSI1PK": feedback_gsi(tenant_id),
                "GSI1SK": after,
            }
        )
    resp = await threads._call(lambda: threads.client.query(**query))
    entries = [_entry_from_item(item) for item in resp.get("Items", [])]
    more = "LastEvaluatedKey" in resp and bool(entries)
    return entries, position(entries[-1]) if more else None
