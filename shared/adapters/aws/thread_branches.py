"""The branch switch of the threads adapter: a thread's current leaf moved to a message it holds.

Two requests: the message's id marker (strongly consistent: a message just stored is found), then the thread item
updated on the condition that the caller owns it and that exactly the expected run holds it (none, for a switch
asked through the API). A message of another thread or tenant has no marker in this partition, so it is NotFound
like an unknown one.
"""

from __future__ import annotations

from botocore.exceptions import ClientError

from shared.adapters.aws import dynamo_codec as codec
from shared.adapters.aws.table_adapter import TableAdapter
from shared.errors import Conflict, NotFound
from shared.models import Identity, Thread


async def set_leaf(
    threads: TableAdapter, identity: Identity, thread_id: str, leaf_id: str, *, holder: str | None
) -> Thread:
    """``ThreadStore.set_leaf`` on ``threads``' table (its requests count as that adapter's)."""
    pk = codec.thread_pk(identity.tenant_id, thread_id)
    table = threads.table_name
    marker = await threads._call(
        lambda: threads.client.get_item(
            TableName=table, Key=codec.to_item({"PK": pk, "SK": codec.msg_id_sk(leaf_id)}), ConsistentRead=True
        )
    )
    if "Item" not in marker:
        raise NotFound("message not found")
    values = {":u": identity.user_id, ":leaf": leaf_id, ":true": True}
    condition = "owner_user_id = :u AND attribute_not_exists(active_run_id)"
    if holder is not None:
        condition = "owner_user_id = :u AND active_run_id = :r"
        values[":r"] = holder
    try:
        resp = await threads._call(
            lambda: threads.client.update_item(
                TableName=table,
                Key=codec.to_item({"PK": pk, "SK": codec.META}),
                # Another branch holds other user messages: admission's digest of them is dropped with the switch.
                UpdateExpression="SET leaf_id = :leaf, branched = :true REMOVE user_digest",
                ConditionExpression=condition,
                ExpressionAttributeValues=codec.to_item(values),
                ReturnValues="ALL_NEW",
            )
        )
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
            raise
        # Someone else's thread (NotFound), or a run holds it.
        item = await threads._call(
            lambda: threads.client.get_item(
                TableName=table, Key=codec.to_item({"PK": pk, "SK": codec.META}), ConsistentRead=True
            )
        )
        thread = item.get("Item")
        if thread is None or codec.from_item(thread).get("owner_user_id") != identity.user_id:
            raise NotFound("thread not found") from exc
        raise Conflict("a run is active on this thread; switch branches when it has ended", code="thread_busy") from exc
    return codec.thread_from_item(resp["Attributes"])
