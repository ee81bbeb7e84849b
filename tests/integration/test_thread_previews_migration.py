"""Migration 4 (``thread-previews``) on DynamoDB (moto): threads stored before previews get the preview of their last
visible message and their count in the list; a thread with a preview, or whose last message a user does not see,
is left as it is."""

from __future__ import annotations

from typing import Any

from shared.adapters.aws import dynamo_codec as codec
from shared.adapters.aws.migration_runner import MigrationRunner, RunnerOptions
from shared.migrations.thread_previews import THREAD_PREVIEWS
from shared.models import Identity, Message, Role
from tests.support.moto_lock import OneRequestAtATime
from tests.support.settings import TABLE

ALICE = Identity(tenant_id="tenant-1", user_id="user-1")
FAST = RunnerOptions(segments=2, page_size=1_000, rate_wcu=1_000_000)


async def old_thread(store: Any, client: Any, thread_id: str, messages: list[tuple[Role, str]]) -> None:
    """A thread as the release before previews stored it: messages, a counter, version 2, no preview."""
    await store.threads.open_thread(ALICE, thread_id)
    for seq, (role, text) in enumerate(messages, start=1):
        msg = Message(id=f"{thread_id}-m{seq}", thread_id=thread_id, role=role, content=text, seq=seq)
        client.put_item(TableName=TABLE, Item=codec.message_to_item("tenant-1", msg))
    client.update_item(
        TableName=TABLE,
        Key=codec.to_item({"PK": codec.thread_pk("tenant-1", thread_id), "SK": codec.META}),
        UpdateExpression="SET last_seq = :n, schema_v = :v",
        ExpressionAttributeValues=codec.to_item({":n": len(messages), ":v": 2}),
    )


async def test_old_threads_get_their_preview_and_count_in_the_list(aws: Any, store: Any) -> None:
    client = OneRequestAtATime(aws)
    # GIVEN an old thread ending with an answer, one ending with a tool result, and an empty one
    await old_thread(store, client, "old-1", [(Role.USER, "where to go"), (Role.ASSISTANT, "Lisbon, in May")])
    await old_thread(store, client, "old-2", [(Role.USER, "run it"), (Role.TOOL, "42")])
    await old_thread(store, client, "old-3", [])
    listed, _ = await store.threads.list_threads(ALICE, limit=10, cursor=None)
    assert all(t.last_message is None for t in listed)
    # WHEN migration 4 runs (twice: the second finds nothing to do)
    runner = MigrationRunner(TABLE, client, FAST)
    first = runner.run(THREAD_PREVIEWS)
    again = runner.run(THREAD_PREVIEWS)
    # THEN the list shows the old answer as the preview with its count; the others are as they were
    listed, _ = await store.threads.list_threads(ALICE, limit=10, cursor=None)
    by_id = {t.thread_id: t for t in listed}
    last = by_id["old-1"].last_message
    assert last is not None and last.role == "assistant" and last.preview == "Lisbon, in May"
    assert by_id["old-1"].message_count == 2
    assert by_id["old-2"].last_message is None and by_id["old-3"].last_message is None
    assert first.counts.changed == 1 and again.write_units == 0
