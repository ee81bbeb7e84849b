"""Coalesced memory extraction end to end: chat turns through the API, "run completed" through EventBridge to SQS
(moto), the memory Lambda handler draining the queue (Powertools batch + idempotency on moto's DynamoDB), memory
runs on a real redis-server stream, delayed "extraction due" messages on the same SQS queue.

The quiet period is real SQS ``DelaySeconds`` (moto honours it); a test lets it pass by moving moto's SQS clock
forward, so nothing here depends on how fast this machine is.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any
from unittest import mock

import boto3
import pytest

from functions.memory_extract.handler import MemoryExtractHandler
from shared.adapters.aws.clients import client_factory
from shared.adapters.aws.dynamodb_store import DynamoDBStore
from shared.adapters.aws.eventbridge import EventBridgePublisher
from shared.adapters.aws.memory_pending import DynamoDBPendingExtractions
from shared.adapters.aws.memory_store import DynamoDBMemoryStore
from shared.llm.types import ChatRequest
from shared.memory.coalescing import memory_run_id
from shared.memory.executor import SYSTEM_PROMPT
from shared.memory.trigger import MEMORY_DETAIL_TYPES, RunCompletedPublisher
from shared.models import utc_now
from shared.wiring import ServiceOverrides, Services
from tests.support.memory_extract_events import NEW_USER_MESSAGE, FakeLambdaContext, memory_model
from tests.support.scripted_model import ScriptedModel, Turn
from tests.support.settings import REGION, TABLE, make_settings
from tests.support.tokens import bearer

BUS = "agent-events-coalescing"
IDEMPOTENCY_TABLE = "agent-test-idempotency"
TENANT, USER = "tenant-1", "user-1"


def is_memory_request(request: ChatRequest) -> bool:
    return bool(request.messages) and request.messages[0].content == SYSTEM_PROMPT


def extraction_calls(model: ScriptedModel) -> list[list[str]]:
    """The new user message ids each memory-model extraction call was shown (its first turn of each run)."""
    return [
        [mid for mid, _ in NEW_USER_MESSAGE.findall(r.messages[-1].content or "")]
        for r in model.requests
        if is_memory_request(r) and not any(m.role == "tool" for m in r.messages)
    ]


def answer(request: ChatRequest) -> Turn:
    """The worker says "ok"; the memory model writes one memory per new user message, then says "done"
    (``memory_model``)."""
    if not is_memory_request(request):
        return Turn(text=["ok"])
    return memory_model(request)


@contextmanager
def time_passes(seconds: float) -> Iterator[None]:
    """Move moto's SQS clock forward: messages delayed by less than ``seconds`` become visible."""
    from moto.sqs import models as sqs_models

    real = sqs_models.unix_time_millis
    with mock.patch.object(sqs_models, "unix_time_millis", lambda *a: real(*a) + seconds * 1000):
        yield


async def pilot_and_baker(deployment: Deployment, client: Any) -> None:
    """A first turn on th-del (a pilot) and on th-keep (a baker), their events handled: two due messages wait."""
    await deployment.turn(client, "th-del", 1, "I am a pilot")
    await deployment.turn(client, "th-keep", 1, "I am a baker")
    await deployment.drain()


def pending_extractions() -> DynamoDBPendingExtractions:
    return DynamoDBPendingExtractions(TABLE, client_factory("dynamodb", region=REGION))


@pytest.fixture
def memory_queue(aws: Any) -> str:
    """The bus, the rule and the memory queue as template.yaml wires them, and the idempotency table."""
    aws.create_table(
        TableName=IDEMPOTENCY_TABLE,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
    )
    events = boto3.client("events", region_name=REGION)
    sqs = boto3.client("sqs", region_name=REGION)
    events.create_event_bus(Name=BUS)
    url = sqs.create_queue(QueueName="agent-memory", Attributes={"VisibilityTimeout": "750"})["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    events.put_rule(
        Name="run-completed",
        EventBusName=BUS,
        EventPattern=json.dumps({"source": ["agent-backend"], "detail-type": list(MEMORY_DETAIL_TYPES)}),
    )
    events.put_targets(Rule="run-completed", EventBusName=BUS, Targets=[{"Id": "memory", "Arn": arn}])
    return str(url)


class Deployment:
    """The API's services (publishing to the bus) and the memory Lambda (draining the queue), sharing one model."""

    def __init__(self, store: DynamoDBStore, redis_stream: Any, redis_url: str, queue_url: str, **settings: Any):
        self.model = ScriptedModel(fallback=answer)
        self.queue_url = queue_url
        self.sqs = boto3.client("sqs", region_name=REGION)
        self.api = Services(
            make_settings(),
            overrides=ServiceOverrides(
                store=store,
                stream=redis_stream,
                model=self.model,
                run_completed_publisher=RunCompletedPublisher(
                    EventBridgePublisher(BUS, lambda: boto3.client("events", region_name=REGION))
                ),
            ),
        )
        self.lambda_services = Services(
            make_settings(
                redis_url=redis_url,
                idempotency_table_name=IDEMPOTENCY_TABLE,
                memory_queue_url=queue_url,
                **settings,
            ),
            overrides=ServiceOverrides(store=store, model=self.model),
        )
        self.handler = MemoryExtractHandler(self.lambda_services)
        self.failures: list[dict[str, Any]] = []
        self.bodies: list[dict[str, Any]] = []

    def receive(self) -> list[dict[str, Any]]:
        resp = self.sqs.receive_message(
            QueueUrl=self.queue_url, MaxNumberOfMessages=10, AttributeNames=["All"], WaitTimeSeconds=0
        )
        return list(resp.get("Messages", []))

    def deliver(self, messages: list[dict[str, Any]]) -> None:
        """Hand messages to the handler as Lambda's SQS poller does; delete what succeeded."""
        records = [
            {
                "messageId": m["MessageId"],
                "receiptHandle": m["ReceiptHandle"],
                "body": m["Body"],
                "attributes": {
                    "ApproximateReceiveCount": m["Attributes"].get("ApproximateReceiveCount", "1"),
                    "SentTimestamp": m["Attributes"]["SentTimestamp"],
                    "SenderId": "AIDAIENQZJOLO23YVJ4VO",
                    "ApproximateFirstReceiveTimestamp": m["Attributes"]["SentTimestamp"],
                },
                "messageAttributes": {},
                "md5OfBody": m["MD5OfBody"],
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:agent-memory",
                "awsRegion": REGION,
            }
            for m in messages
        ]
        self.bodies += [json.loads(m["Body"]) for m in messages]
        response = self.handler.handle({"Records": records}, FakeLambdaContext())  # type: ignore[arg-type]
        failed = {f["itemIdentifier"] for f in response["batchItemFailures"]}
        self.failures += response["batchItemFailures"]
        for m in messages:
            if m["MessageId"] not in failed:
                self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=m["ReceiptHandle"])

    async def drain(self) -> int:
        """Deliver every visible message (and those it causes) to the handler; returns how many were handled."""
        handled = 0
        while messages := self.receive():
            await asyncio.to_thread(self.deliver, messages)
            handled += len(messages)
        return handled

    async def drain_after_quiet_period(self) -> int:
        """`drain` once the memory policy's quiet period (120 s) has passed on moto's SQS clock."""
        with time_passes(121):
            return await self.drain()

    def delayed(self) -> int:
        attrs = self.sqs.get_queue_attributes(QueueUrl=self.queue_url, AttributeNames=["All"])["Attributes"]
        return int(attrs["ApproximateNumberOfMessagesDelayed"])

    async def turn(self, client: Any, thread: str, index: int, text: str) -> None:
        body = {
            "threadId": thread,
            "runId": f"{thread}-run-{index}",
            "messages": [{"id": f"{thread}-u{index}", "role": "user", "content": text}],
        }
        resp = await client.post("/api/v1/agent", json=body, headers=bearer(USER, TENANT))
        assert resp.status_code == 200
        await self.api.runs.wait_idle()

    def close(self) -> None:
        self.handler.close()


@pytest.fixture
def deployment(store: DynamoDBStore, redis_stream: Any, redis_url: str, memory_queue: str) -> Iterator[Deployment]:
    d = Deployment(store, redis_stream, redis_url, memory_queue)
    yield d
    d.close()


def memories() -> list[str]:
    store = DynamoDBMemoryStore(TABLE, client_factory("dynamodb", region=REGION))
    return sorted(m.content for m in asyncio.run(store.list_memories(TENANT, USER)))


async def test_a_burst_of_8_quick_turns_through_the_api_makes_at_most_2_memory_model_calls(
    deployment: Deployment, asgi_client: Any
) -> None:
    # GIVEN the shipped memory policy (quiet period 120 s, at most 6 pending user messages)
    # WHEN a user sends 8 quick turns on one thread, the memory Lambda handling each event as it arrives
    async with asgi_client(deployment.api) as client:
        for i in range(1, 9):
            await deployment.turn(client, "th-burst", i, f"fact number {i} about me")
            await deployment.drain()
    # THEN the 6th turn extracted at once, over the 6 turns since the cursor; turns 7-8 wait for quiet
    assert extraction_calls(deployment.model) == [[f"th-burst-u{i}" for i in range(1, 7)]]
    assert deployment.delayed() >= 1
    # WHEN the thread stays quiet for the idle period
    await deployment.drain_after_quiet_period()
    # THEN one more extraction reads turns 7-8 only: 2 extraction calls for 8 turns, no message read twice
    calls = extraction_calls(deployment.model)
    assert calls == [[f"th-burst-u{i}" for i in range(1, 7)], ["th-burst-u7", "th-burst-u8"]]
    memory_requests = [r for r in deployment.model.requests if is_memory_request(r)]
    assert len(memory_requests) == 4, "each run: one proposal turn and one closing turn"
    assert len(await asyncio.to_thread(memories)) == 8
    assert deployment.failures == [] and deployment.delayed() == 0 and deployment.receive() == []


async def test_turns_spread_out_coalesce_into_one_run_when_the_thread_goes_quiet(
    deployment: Deployment, asgi_client: Any
) -> None:
    # GIVEN three turns, each followed by its event being handled
    async with asgi_client(deployment.api) as client:
        for i in range(1, 4):
            await deployment.turn(client, "th-quiet", i, f"I like colour {i}")
            await deployment.drain()
    # THEN nothing was extracted yet: three due messages are waiting, delayed by the quiet period
    assert extraction_calls(deployment.model) == []
    assert deployment.delayed() == 3
    # WHEN less than the quiet period has passed THEN still nothing
    with time_passes(60):
        assert await deployment.drain() == 0
    # WHEN the quiet period has passed THEN the two older due messages are dropped, the newest extracts once
    assert await deployment.drain_after_quiet_period() == 3
    assert extraction_calls(deployment.model) == [["th-quiet-u1", "th-quiet-u2", "th-quiet-u3"]]


async def test_duplicated_and_out_of_order_events_never_extract_the_same_messages_twice(
    deployment: Deployment, asgi_client: Any
) -> None:
    async with asgi_client(deployment.api) as client:
        for i in range(1, 4):
            await deployment.turn(client, "th-dup", i, f"my hobby number {i}")
    # GIVEN the three run-completed events on the queue; WHEN they are delivered in reverse order, each twice
    # (an SQS redelivery: same event id) and once more as a re-published copy (a new event id)
    events = []
    while batch := deployment.receive():
        events += batch
    assert len(events) == 3
    bodies = [json.loads(m["Body"]) for m in reversed(events)]
    republished = [{**b, "id": str(uuid.uuid4())} for b in bodies]
    for body in [*bodies, *bodies, *republished]:
        deployment.sqs.send_message(QueueUrl=deployment.queue_url, MessageBody=json.dumps(body))
    await deployment.drain()
    with time_passes(121):
        await deployment.drain()
        # AND every due message is delivered a second time
        dues = [b for b in deployment.bodies if b.get("type") == "memory.extraction.due"]
        for due in dues:
            deployment.sqs.send_message(QueueUrl=deployment.queue_url, MessageBody=json.dumps(due))
        await deployment.drain()
    # THEN exactly one extraction read the three messages, once
    assert extraction_calls(deployment.model) == [["th-dup-u1", "th-dup-u2", "th-dup-u3"]]
    assert len(await asyncio.to_thread(memories)) == 3

    # WHEN an old event is re-published after the extraction (a late duplicate) and its due message fires
    deployment.sqs.send_message(
        QueueUrl=deployment.queue_url, MessageBody=json.dumps({**bodies[0], "id": str(uuid.uuid4())})
    )
    await deployment.drain()
    await deployment.drain_after_quiet_period()
    # THEN no new run: nothing is new after the cursor
    assert len(extraction_calls(deployment.model)) == 1


async def test_thread_and_user_cancellation_drop_pending_extraction(
    deployment: Deployment, asgi_client: Any, store: DynamoDBStore
) -> None:
    pending = pending_extractions()
    async with asgi_client(deployment.api) as client:
        await pilot_and_baker(deployment, client)
    # WHEN the first thread is deleted (its marker cancelled) before the quiet period ends
    await pending.cancel_thread(TENANT, "th-del")
    await deployment.drain_after_quiet_period()
    # THEN only the other thread was extracted
    assert extraction_calls(deployment.model) == [["th-keep-u1"]]

    # GIVEN a new turn on a kept thread; WHEN the user is deleted before the quiet period ends
    async with asgi_client(deployment.api) as client:
        await deployment.turn(client, "th-keep", 2, "I am also a cyclist")
        await deployment.drain()
    await pending.cancel_user(TENANT, USER, now=utc_now() + timedelta(seconds=1))
    await deployment.drain_after_quiet_period()
    # THEN nothing more is extracted
    assert len(extraction_calls(deployment.model)) == 1


async def test_deleting_a_thread_and_the_account_through_the_api_cancels_their_pending_extraction(
    deployment: Deployment, asgi_client: Any, store: DynamoDBStore
) -> None:
    pending = pending_extractions()
    async with asgi_client(deployment.api) as client:
        # GIVEN a turn on two threads, their events handled: two pending markers, two due messages delayed
        await pilot_and_baker(deployment, client)
        marker = await pending.get(TENANT, "th-del")
        assert marker is not None and deployment.delayed() == 2
        # WHEN the owner deletes th-del through the API before the quiet period ends
        assert (await client.delete("/api/v1/threads/th-del", headers=bearer(USER, TENANT))).status_code == 204
    assert await pending.get(TENANT, "th-del") is None
    # THEN its due message, once delivered, finds nothing to run: no memory run, no failed record
    assert await deployment.drain_after_quiet_period() == 2
    assert extraction_calls(deployment.model) == [["th-keep-u1"]]
    assert await store.runs.get_run(TENANT, memory_run_id(TENANT, "th-del", marker.generation, 1)) is None
    assert deployment.failures == []

    # GIVEN a new turn on the kept thread, its extraction pending
    async with asgi_client(deployment.api) as client:
        await deployment.turn(client, "th-keep", 2, "I am also a cyclist")
        await deployment.drain()
        # WHEN the user deletes their account
        resp = await client.delete("/api/v1/me", headers=bearer(USER, TENANT, scopes=("agent:erase",)))
        assert resp.status_code == 200 and resp.json()["deleted"] == {"threads": 1, "memories": 1, "automations": 0}
    # THEN the due message runs nothing, and the user has no memories left
    assert await deployment.drain_after_quiet_period() == 1
    assert len(extraction_calls(deployment.model)) == 1
    assert deployment.failures == [] and await asyncio.to_thread(memories) == []


async def test_at_most_one_memory_run_in_flight_per_thread(deployment: Deployment, asgi_client: Any) -> None:
    pending = pending_extractions()
    async with asgi_client(deployment.api) as client:
        await deployment.turn(client, "th-busy", 1, "I keep bees")
        await deployment.drain()
    # GIVEN another memory run holds the thread's lease (say, a slow run on another Lambda instance)
    now = utc_now()
    other = memory_run_id(TENANT, "th-busy", 99, 1)
    assert await pending.acquire(TENANT, "th-busy", other, now=now, lease_until=now + timedelta(seconds=900))
    # WHEN the quiet period passes THEN no second run starts; the due message is sent again for later
    await deployment.drain_after_quiet_period()
    assert extraction_calls(deployment.model) == []
    assert deployment.delayed() == 1
    # WHEN the other run ends THEN the retried due message extracts
    await pending.release(TENANT, "th-busy", other)
    with time_passes(200):
        await deployment.drain()
    assert extraction_calls(deployment.model) == [["th-busy-u1"]]


def memory_statuses() -> dict[str, str]:
    store = DynamoDBMemoryStore(TABLE, client_factory("dynamodb", region=REGION))
    found = asyncio.run(store.list_memories(TENANT, USER, include_inactive=True))
    return {m.content: m.status.value for m in found}


async def test_a_branch_switch_alone_retracts_the_left_branchs_memories_after_the_quiet_period(
    deployment: Deployment, asgi_client: Any
) -> None:
    """docs/memory.md, "Memories and branches": the switch publishes ``agent.branch.switched``; the memory Lambda
    retracts once the left branch has stayed non-current for the quiet period, with no run on the thread."""
    async with asgi_client(deployment.api) as client:
        # GIVEN a thread whose first message was edited, each branch's fact extracted after its quiet period
        await deployment.turn(client, "th-br", 1, "I live in Paris")
        await deployment.drain()
        await deployment.drain_after_quiet_period()
        edit = {
            "threadId": "th-br",
            "runId": "th-br-run-2",
            "messages": [{"id": "th-br-u1b", "role": "user", "content": "I live in Rome"}],
            "forwardedProps": {"parentMessageId": None},
        }
        assert (await client.post("/api/v1/agent", json=edit, headers=bearer(USER, TENANT))).status_code == 200
        await deployment.api.runs.wait_idle()
        await deployment.drain()
        await deployment.drain_after_quiet_period()
        assert await asyncio.to_thread(memory_statuses) == {"I live in Paris": "retracted", "I live in Rome": "active"}
        worker_calls = [r for r in deployment.model.requests if not is_memory_request(r)]
        # WHEN the user switches back to the first branch, and writes nothing more
        resp = await client.put(
            "/api/v1/threads/th-br/branch", json={"throughMessageId": "th-br-u1"}, headers=bearer(USER, TENANT)
        )
        assert resp.status_code == 200
        await deployment.drain()
        # THEN nothing changes before the quiet period is over
        assert await asyncio.to_thread(memory_statuses) == {"I live in Paris": "retracted", "I live in Rome": "active"}
        assert deployment.delayed() == 1
        # WHEN the quiet period passes THEN the memory drawn only from the branch left is retracted; the one
        # retracted before stays so (switching back resurrects nothing); no model was called for it
        await deployment.drain_after_quiet_period()
    assert await asyncio.to_thread(memory_statuses) == {"I live in Paris": "retracted", "I live in Rome": "retracted"}
    assert [r for r in deployment.model.requests if not is_memory_request(r)] == worker_calls
    assert extraction_calls(deployment.model) == [["th-br-u1"], ["th-br-u1b"]]
    assert deployment.failures == [] and deployment.delayed() == 0


async def test_make_dev_coalesces_the_same_way_with_a_shortened_quiet_period(
    store: DynamoDBStore, redis_stream: Any, asgi_client: Any
) -> None:
    """The local runner's in-process worker: the same coalescer, timers instead of SQS delays (MEMORY_IDLE_S)."""
    from devtools.local.memory_worker import InProcessMemoryWorker

    model = ScriptedModel(fallback=answer)
    services = Services(
        make_settings(memory_idle_s=5), overrides=ServiceOverrides(store=store, stream=redis_stream, model=model)
    )
    worker = InProcessMemoryWorker(services)
    services.use_run_completed_publisher(RunCompletedPublisher(worker))
    try:
        async with asgi_client(services) as client:
            for i in range(1, 4):
                body = {
                    "threadId": "th-dev",
                    "runId": f"th-dev-run-{i}",
                    "messages": [{"id": f"th-dev-u{i}", "role": "user", "content": f"I collect stamps, fact {i}"}],
                }
                assert (await client.post("/api/v1/agent", json=body, headers=bearer(USER, TENANT))).status_code == 200
                await services.runs.wait_idle()
                await worker.drain()
            # THEN nothing is extracted during the burst
            assert extraction_calls(model) == []
            # WHEN the (shortened) quiet period passes THEN one extraction reads the three turns
            await asyncio.sleep(7)
            await worker.drain()
            await services.runs.wait_idle()
    finally:
        worker.close()
    assert extraction_calls(model) == [["th-dev-u1", "th-dev-u2", "th-dev-u3"]]


async def test_make_dev_retracts_after_a_branch_switch_too(
    store: DynamoDBStore, redis_stream: Any, asgi_client: Any
) -> None:
    """The local runner's in-process worker takes ``agent.branch.switched`` like the memory Lambda does."""
    from devtools.local.memory_worker import InProcessMemoryWorker

    model = ScriptedModel(fallback=answer)
    services = Services(
        make_settings(memory_idle_s=1), overrides=ServiceOverrides(store=store, stream=redis_stream, model=model)
    )
    worker = InProcessMemoryWorker(services)
    services.use_run_completed_publisher(RunCompletedPublisher(worker))
    headers = bearer(USER, TENANT)
    try:
        async with asgi_client(services) as client:
            for run, msg, text, parent in (
                ("r1", "dv-u1", "I live in Oslo", {}),
                ("r2", "dv-u1b", "I live in Bergen", {"parentMessageId": None}),
            ):
                body = {
                    "threadId": "th-dev-br",
                    "runId": run,
                    "messages": [{"id": msg, "role": "user", "content": text}],
                    "forwardedProps": parent,
                }
                assert (await client.post("/api/v1/agent", json=body, headers=headers)).status_code == 200
                await services.runs.wait_idle()
                await asyncio.sleep(1.5)
                await worker.drain()
            assert await asyncio.to_thread(memory_statuses) == {
                "I live in Oslo": "retracted",
                "I live in Bergen": "active",
            }
            put = await client.put(
                "/api/v1/threads/th-dev-br/branch", json={"throughMessageId": "dv-u1"}, headers=headers
            )
            assert put.status_code == 200
            await worker.drain()
            await asyncio.sleep(1.5)
            await worker.drain()
    finally:
        worker.close()
    assert await asyncio.to_thread(memory_statuses) == {"I live in Oslo": "retracted", "I live in Bergen": "retracted"}
