"""The change of a thread's product fields (``PATCH /threads/{id}``): its title, metadata, archived and pinned.

Two requests: the thread item read (NotFound when it is not the caller's), then one update of the projected
attributes (``title`` as a map with the metadata, ``archived``, ``pinned``: see ``dynamo_codec.thread_fields_from_
data``) on the condition that the caller still owns it. The merge happens here, between the two: two PATCHes of the
same thread at the same moment by its one owner are last-writer-wins, which a sidebar's rename and pin tolerate.
The update writes the thread-list index entry once (the attributes are projected), a user's action, not a turn's.
"""

from __future__ import annotations

from botocore.exceptions import ClientError

from shared.adapters.aws import dynamo_codec as codec
from shared.adapters.aws.table_adapter import TableAdapter
from shared.errors import NotFound
from shared.models import Identity, Thread
from shared.thread_fields import ThreadChanges, apply_changes


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
