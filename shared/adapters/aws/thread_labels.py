"""The change of a thread's product fields (``PATCH /threads/{id}``): its title, metadata, archived and pinned.

Two requests: the thread item read (NotFound when it is not the caller's), then one update of the projected
attributes (``title`` as a map with the metadata, ``archived``, ``pinned``: see ``dynamo_codec.thread_fields_from_
data``) on the condition that the caller still owns it. The merge happens here, between the two: two PATCHes of the
same thread at the same moment by its one owner are last-writer-wins, which a sidebar's rename and pin tolerate.
The update writes the thread-list index entry once (the attributes are projected), a user's action, not a turn's.

A generated title (``set_generated_title``, the title job's one write) is the other writer of ``title``. It must
never replace what a client set, so its condition is in the write: the map's ``text`` and ``source`` absent (or the
map itself, on a thread never changed). Only those two paths are set, so metadata a client wrote is kept.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from shared.adapters.aws import dynamo_codec as codec
from shared.adapters.aws.table_adapter import TableAdapter
from shared.errors import NotFound
from shared.models import Identity, Thread
from shared.thread_fields import GENERATED_TITLE, ThreadChanges, apply_changes

ATTEMPTS = 2
"""A generated title's write is tried again once when its condition failed because the map appeared meanwhile
(a metadata-only ``PATCH``): the second read tells a client's title from a map without one."""


async def update_thread(threads: TableAdapter, current: Thread, identity: Identity, changes: ThreadChanges) -> Thread:
    """``ThreadStore.update_thread`` on ``threads``' table, given the caller's ``current`` thread (already read)."""
    changed = apply_changes(current, changes)
    values = {
        ":u": identity.user_id,
        ":label": codec.label_value(changed.title, changed.title_source, changed.metadata),
        ":a": changed.archived,
        ":p": changed.pinned,
    }
    key = {"PK": codec.thread_pk(identity.tenant_id, current.thread_id), "SK": codec.META}
    try:
        await threads._call(
            lambda: threads.client.update_item(
                TableName=threads.table_name,
                Key=codec.to_item(key),
                UpdateExpression="SET title = :label, archived = :a, pinned = :p",
                ConditionExpression="owner_user_id = :u",
                ExpressionAttributeValues=codec.to_item(values),
            )
        )
    except ClientError as exc:
        if exc.response["Error"]["Code"] == "ConditionalCheckFailedException":
            raise NotFound("thread not found") from exc
        raise
    return changed



class GeneratedTitles(TableAdapter):
    """The thread adapter's generated-title write, kept here beside the other writer of ``title``."""

    async def set_generated_title(self, identity: Identity, thread_id: str, title: str) -> bool:
        """``ThreadStore.set_generated_title``: a read of the thread's owner and ``title`` map, then one conditional
        update (twice at most, see :data:`ATTEMPTS`)."""
        for _ in range(ATTEMPTS):
            written = await _write_generated_title(self, identity, thread_id, title)
            if written is not None:
                return written
        return False

async def _write_generated_title(
    threads: TableAdapter, identity: Identity, thread_id: str, title: str
) -> bool | None:
    """One read and conditional update: True written, False a title is there, None the map changed meanwhile."""
    key = codec.to_item({"PK": codec.thread_pk(identity.tenant_id, thread_id), "SK": codec.META})
    response = await threads._call(
        lambda: threads.client.get_item(
            TableName=threads.table_name, Key=key, ProjectionExpression="owner_user_id, title", ConsistentRead=True
        )
    )
    item = codec.from_item(response["Item"]) if "Item" in response else {}
    if item.get("owner_user_id") != identity.user_id:
        raise NotFound("thread not found")
    label = item.get("title")
    request: dict[str, Any] = {"TableName": threads.table_name, "Key": key}
    if label is None:  # no map yet: the whole map, on the condition that none appeared
        request["UpdateExpression"] = "SET title = :label"
        request["ConditionExpression"] = "owner_user_id = :u AND attribute_not_exists(title)"
        values: dict[str, Any] = {":label": codec.label_value(title, GENERATED_TITLE, {})}
    elif label.get("text") is not None or label.get("source") is not None:
        return False
    else:  # a map with metadata only: its two paths, on the condition that neither appeared
        request["UpdateExpression"] = "SET title.#text = :text, title.#source = :source"
        request["ConditionExpression"] = (
            "owner_user_id = :u AND attribute_exists(title) "
            "AND attribute_not_exists(title.#text) AND attribute_not_exists(title.#source)"
        )
        request["ExpressionAttributeNames"] = {"#text": "text", "#source": "source"}
        values = {":text": title, ":source": GENERATED_TITLE}
    request["ExpressionAttributeValues"] = codec.to_item({**values, ":u": identity.user_id})
    try:
        await threads._call(lambda: threads.client.update_item(**request))
    except ClientError as exc:
        if exc.response["Error"]["Code"] == "ConditionalCheckFailedException":
            return None
        raise
    return True
