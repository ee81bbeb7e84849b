"""Feedback on an answer, stored on the answer's message item (``feedback``, JSON).

On the message item, not an item of its own: the history reads it with the message at no extra request, and it goes
with the thread's messages (``DELETE /threads/{id}``, ``DELETE /me``) with nothing more to find. Three requests
after the thread's ownership read: the message's id marker (its seq), the message (an answer a user sees, else
``not_an_answer``), and the update. One feedback per message: the thread's owner is its only user.
"""

from __future__ import annotations

from shared.adapters.aws import dynamo_codec as codec
from shared.adapters.aws.table_adapter import TableAdapter
from shared.errors import NotFound
from shared.models import Feedback, Identity, Message
from shared.thread_fields import check_answer


async def set_feedback(
    threads: TableAdapter, identity: Identity, thread_id: str, message_id: str, feedback: Feedback | None
) -> Message:
    """``ThreadStore.set_feedback`` once the thread is known to be the caller's."""
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
    if feedback is None:
        update, values = "REMOVE feedback", None
    else:
        update, values = "SET feedback = :f", codec.to_item({":f": feedback.model_dump_json()})
    await threads._call(
        lambda: threads.client.update_item(
            TableName=table,
            Key=key,
            UpdateExpression=update,
            **({"ExpressionAttributeValues": values} if values else {}),  # type: ignore[arg-type]
        )
    )
    return message.model_copy(update={"feedback": feedback})
