"""Migration 3 (``message-parents``) on DynamoDB (moto), on a table of threads stored before threads were trees:
every message gets the parent the stored order gives it, the history shows ``parentId``, and a thread migrated (or
not yet) reads and runs the same."""

from __future__ import annotations

from typing import Any

from shared.adapters.aws import dynamo_codec as codec
from shared.adapters.aws.migration_runner import MigrationRunner, RunnerOptions
from shared.adapters.aws.threads import DynamoDBThreads
from shared.context_window import BranchReader
from shared.migrations.message_parents import MESSAGE_PARENTS
from shared.models import Identity, Message, Role
from tests.support.chat_requests import post_run, run_body, user
from tests.support.moto_lock import OneRequestAtATime
from tests.support.scripted_model import ScriptedModel, Turn
from tests.support.settings import TABLE
from tests.support.tokens import bearer

ALICE = Identity(tenant_id="tenant-1", user_id="user-1")
FAST = RunnerOptions(segments=2, page_size=1_000, rate_wcu=1_000_000)


async def old_thread(store: Any, client: Any, thread_id: str, texts: list[str]) -> None:
    """A thread as the release before trees stored it: messages without ``parent_id``, a thread without a leaf."""
    threads: DynamoDBThreads = store.threads
    await threads.open_thread(ALICE, thread_id)
    for i, text in enumerate(texts, start=1):
        role = Role.USER if i % 2 else Role.ASSISTANT
        msg = Message(id=f"{thread_id}-m{i}", thread_id=thread_id, role=role, content=text, seq=i)
        item = codec.message_to_item("tenant-1", msg)
        for old_only in ("parent_id", "schema_v"):
            item.pop(old_only, None)
        client.put_item(TableName=TABLE, Item=item)
    client.update_item(
        TableName=TABLE,
        Key=codec.to_item({"PK": codec.thread_pk("tenant-1", thread_id), "SK": codec.META}),
        UpdateExpression="SET last_seq = :n",
        ExpressionAttributeValues=codec.to_item({":n": len(texts)}),
    )


def parents(client: Any, thread_id: str) -> list[str | None]:
    resp = client.query(
        TableName=TABLE,
        KeyConditionExpression="PK = :pk AND begins_with(SK, :m)",
        ExpressionAttributeValues=codec.to_item({":pk": codec.thread_pk("tenant-1", thread_id), ":m": "M#"}),
    )
    return [codec.from_item(i).get("parent_id") for i in resp["Items"]]


async def test_old_threads_get_their_parents_and_read_the_same(
    aws: Any, store: Any, make_services: Any, asgi_client: Any
) -> None:
    client = OneRequestAtATime(aws)
    # GIVEN two threads stored before trees, and a thread stored since
    await old_thread(store, client, "old-1", ["q1", "a1", "q2", "a2"])
    await old_thread(store, client, "old-2", ["only question"])
    model = ScriptedModel(Turn(text=["new answer"]), Turn(text=["after the migration"]))
    async with asgi_client(make_services(model)) as api:
        await post_run(api, run_body("new-1", "r1", [user("n1", "new question")]))
        # AND an old thread reads as one branch before the migration
        before = [
            m.content
            for m in await BranchReader(store.threads, None).read_back("tenant-1", "old-1", before_seq=None, limit=50)
        ]
        assert before == ["a2", "q2", "a1", "q1"]
        assert parents(client, "old-1") == [None, None, None, None]
        # WHEN migration 3 runs (twice: the second finds nothing to do)
        runner = MigrationRunner(TABLE, client, FAST)
        first = runner.run(MESSAGE_PARENTS)
        again = runner.run(MESSAGE_PARENTS)
        # THEN each old message follows the one stored before it, and the first is a root
        assert parents(client, "old-1") == ["", "old-1-m1", "old-1-m2", "old-1-m3"]
        assert parents(client, "old-2") == [""]
        assert parents(client, "new-1") == ["", "n1"]  # written since: untouched
        assert first.counts.changed == 5 and again.write_units == 0
        # AND the history shows parentId, and a new turn on the old thread sees the whole stored order
        history = (await api.get("/api/v1/threads/old-1/history", headers=bearer())).json()["items"]
        assert [i["parentId"] for i in history] == [None, "old-1-m1", "old-1-m2", "old-1-m3"]
        status, frames = await post_run(api, run_body("old-1", "r2", [user("old-1-m1", "q1"), user("q3", "third")]))
        assert status == 200, frames
    texts = [m.content for m in model.requests[1].messages[1:]]
    assert texts[:4] == ["q1", "a1", "q2", "a2"] and texts[-1].endswith("third")
