"""The memory_extract Lambda handler end to end: SQS records wrapping EventBridge events (and the delayed
"extraction due" messages they cause, on moto's SQS), Powertools batch and idempotency on moto's DynamoDB, the
memory run on a real redis-server stream, a scripted model. The quiet period is 0 s here (``MEMORY_IDLE_S``):
coalescing itself is tested in ``test_memory_coalescing.py``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from redis import Redis

from functions.memory_extract.handler import MemoryExtractHandler
from shared.adapters.aws.clients import client_factory
from shared.adapters.aws.dynamodb_store import DynamoDBStore
from shared.adapters.aws.memory_store import DynamoDBMemoryStore
from shared.adapters.redis_stream import thread_stream_key
from shared.errors import ModelError
from shared.memory.coalescing import memory_run_id
from shared.memory.models import Memory
from shared.models import RunStatus
from shared.wiring import ServiceOverrides, Services
from tests.support.memory_extract_events import (
    IDEMPOTENCY_TABLE,
    TENANT,
    FakeLambdaContext,
    RaisingScriptedModel,
    due_records,
    run_completed,
    seed,
    sqs_record,
)
from tests.support.scripted_model import Turn
from tests.support.settings import REGION, TABLE, make_settings


@pytest.fixture
def handler_env(aws: Any, store: DynamoDBStore, redis_url: str) -> Iterator[tuple[MemoryExtractHandler, Any]]:
    queue_url = boto3.client("sqs", region_name=REGION).create_queue(QueueName="agent-memory")["QueueUrl"]
    aws.create_table(
        TableName=IDEMPOTENCY_TABLE,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
    )
    model = RaisingScriptedModel()
    services = Services(
        make_settings(
            redis_url=redis_url, idempotency_table_name=IDEMPOTENCY_TABLE, memory_queue_url=queue_url, memory_idle_s=0
        ),
        overrides=ServiceOverrides(store=store, model=model),
    )
    handler = MemoryExtractHandler(services)
    yield handler, model
    handler.close()


def memories_of(user: str) -> list[Memory]:
    memories = DynamoDBMemoryStore(TABLE, client_factory("dynamodb", region=REGION))
    return asyncio.run(memories.list_memories(TENANT, user, include_inactive=True))


def count_table_items() -> int:
    return int(boto3.client("dynamodb", region_name=REGION).scan(TableName=TABLE, Select="COUNT")["Count"])


def thread_events(redis_url: str, thread: str) -> list[dict[str, Any]]:
    client = Redis.from_url(redis_url)
    try:
        entries: Any = client.xrange(thread_stream_key(TENANT, thread))
        return [json.loads(fields[b"e"]) for _id, fields in entries]
    finally:
        client.close()


def test_batch_reports_exactly_the_failed_records_and_a_replay_writes_nothing(
    handler_env: tuple[MemoryExtractHandler, Any], store: DynamoDBStore, redis_url: str
) -> None:
    handler, model = handler_env
    # GIVEN three threads with something worth remembering, and one whose extraction fails at the model
    asyncio.run(seed(store, "u-1", "th-a", "I am a nurse and I work night shifts."))
    asyncio.run(seed(store, "u-1", "th-b", "我对花生过敏。"))
    asyncio.run(seed(store, "u-2", "th-c", "I prefer answers in bullet points."))
    asyncio.run(seed(store, "u-3", "th-fail", "please fail: the model breaks on this thread"))
    event_a = run_completed("u-1", "th-a", "run-a")
    records = [
        sqs_record(event_a),
        sqs_record(run_completed("u-1", "th-b", "run-b")),
        malformed := sqs_record('{"version": "0", "detail-type": "agent.run.completed", "detail": '),
        failing := sqs_record(run_completed("u-3", "th-fail", "run-fail")),
        sqs_record(run_completed("u-2", "th-c", "run-c")),
        sqs_record(event_a),  # the same event delivered twice
        sqs_record(run_completed("u-1", "th-a", "run-a")),  # a second event about the same run
    ]
    batch = {"Records": records}

    # WHEN the handler processes the batch
    response = handler.handle(batch, FakeLambdaContext())  # type: ignore[arg-type]

    # THEN the response lists exactly the malformed record (the events are noted, each thread's due message sent)
    assert [f["itemIdentifier"] for f in response["batchItemFailures"]] == [malformed["messageId"]]
    assert memories_of("u-1") == []
    dues = due_records()
    assert len(dues) == 5, "one per noted event: th-a (twice: two event ids), th-b, th-fail, th-c"

    # WHEN the due messages arrive
    due_response = handler.handle({"Records": dues}, FakeLambdaContext())  # type: ignore[arg-type]

    # THEN exactly the failing thread's due message fails
    [failing] = [r for r in dues if json.loads(r["body"])["threadId"] == "th-fail"]
    assert [f["itemIdentifier"] for f in due_response["batchItemFailures"]] == [failing["messageId"]]
    # AND each good thread's fact was written once (the duplicate event and the second event wrote nothing)
    assert [m.content for m in memories_of("u-1")] in (
        ["我对花生过敏。", "I am a nurse and I work night shifts."],
        ["I am a nurse and I work night shifts.", "我对花生过敏。"],
    )
    assert [m.content for m in memories_of("u-2")] == ["I prefer answers in bullet points."]
    assert memories_of("u-3") == []
    [nurse] = [m for m in memories_of("u-1") if "nurse" in m.content]
    run_a = memory_run_id(TENANT, "th-a", 2, 1)  # generation 2: the second event (new id) superseded the first
    assert (nurse.run_id, nurse.thread_id, nurse.source_message_ids) == (run_a, "th-a", ("th-a-u1",))

    # AND the thread stream opens with the thread's title (this test's memory model answers a title request with
    # nothing, so it is the first message: the title job is tested in test_thread_titles.py), written once
    title, *events = thread_events(redis_url, "th-a")
    assert title == {
        "type": "CUSTOM",
        "name": "thread_title",
        "value": {"threadId": "th-a", "title": "I am a nurse and I work night shifts."},
    }
    # AND the memory run is a hidden automation run, seen on the thread stream only as a `memory` step
    assert [e["type"] for e in events] == ["RUN_STARTED", "STEP_STARTED", "STEP_FINISHED", "RUN_FINISHED"]
    assert {e["stepName"] for e in events if e["type"].startswith("STEP_")} == {"memory"}
    assert events[0]["metadata"] == {
        "origin": "automation",
        "executor": "memory",
        "executionProfileName": "automation_memory_default",
        "hiddenFromUser": True,
        "runId": run_a,
    }
    run = asyncio.run(store.runs.get_run(TENANT, run_a))
    assert run is not None and run.status is RunStatus.SUCCEEDED and run.meta.hidden_from_user
    failed_run = asyncio.run(store.runs.get_run(TENANT, memory_run_id(TENANT, "th-fail", 1, 1)))
    assert failed_run is not None and failed_run.status is RunStatus.FAILED
    # AND it is in audit, and wrote nothing into the thread's history
    audit = asyncio.run(store.audit.list_for_thread(TENANT, "th-a", limit=50))
    assert [r.details["decision"] for r in audit if r.kind == "memory_decision"] == ["stored"]
    assert [r.details["decisions"] for r in audit if r.kind == "memory_run"] == [{"stored": 1}]
    history = asyncio.run(store.threads.read_forward(TENANT, "th-a", after_seq=0, limit=50))
    assert [m.id for m in history] == ["th-a-u1", "th-a-a1"]

    # WHEN both batches are delivered again
    items_before, requests_before = count_table_items(), len(model.requests)
    replay = handler.handle(batch, FakeLambdaContext())  # type: ignore[arg-type]
    due_replay = handler.handle({"Records": dues}, FakeLambdaContext())  # type: ignore[arg-type]

    # THEN the same records fail, no new due message is sent, nothing new is written anywhere, and the model is
    # not asked again
    assert [f["itemIdentifier"] for f in replay["batchItemFailures"]] == [malformed["messageId"]]
    assert [f["itemIdentifier"] for f in due_replay["batchItemFailures"]] == [failing["messageId"]]
    assert due_records() == []
    assert count_table_items() == items_before
    assert len(model.requests) == requests_before
    assert len(memories_of("u-1")) == 2


def test_a_retry_after_a_failure_extracts_with_a_fresh_run(
    handler_env: tuple[MemoryExtractHandler, Any], store: DynamoDBStore
) -> None:
    handler, model = handler_env
    asyncio.run(seed(store, "u-9", "th-retry", "I run marathons every spring."))
    noted = handler.handle({"Records": [sqs_record(run_completed("u-9", "th-retry", "run-r"))]}, FakeLambdaContext())  # type: ignore[arg-type]
    assert noted["batchItemFailures"] == []
    [due] = due_records()
    model.turns.append(Turn(raise_error=ModelError("the model endpoint is down", code="model_unavailable")))
    first = handler.handle({"Records": [due]}, FakeLambdaContext())  # type: ignore[arg-type]
    assert len(first["batchItemFailures"]) == 1 and memories_of("u-9") == []
    # SQS delivers the same message again (receive count 2): the idempotency record was not kept for a failure
    second = handler.handle({"Records": [sqs_record(due["body"], receive_count=2)]}, FakeLambdaContext())  # type: ignore[arg-type]
    assert second["batchItemFailures"] == []
    assert [m.run_id for m in memories_of("u-9")] == [memory_run_id(TENANT, "th-retry", 1, 2)]


@dataclass
class AlmostOutOfTime(FakeLambdaContext):
    """An invocation with 3 s left."""

    def get_remaining_time_in_millis(self) -> int:
        return 3_000


def test_a_memory_run_that_would_outlive_the_invocation_ends_with_run_deadline_and_its_record_is_retried(
    aws: Any, store: DynamoDBStore, redis_url: str
) -> None:
    # GIVEN a memory function whose runs keep a 1.9 s margin before the deadline, a slow model, and 3 s left
    queue_url = boto3.client("sqs", region_name=REGION).create_queue(QueueName="agent-memory")["QueueUrl"]
    aws.create_table(
        TableName=IDEMPOTENCY_TABLE,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
    )
    model = RaisingScriptedModel()
    services = Services(
        make_settings(
            redis_url=redis_url,
            idempotency_table_name=IDEMPOTENCY_TABLE,
            memory_queue_url=queue_url,
            memory_idle_s=0,
            run_deadline_margin_s=1.9,
        ),
        overrides=ServiceOverrides(store=store, model=model),
    )
    handler = MemoryExtractHandler(services)
    try:
        asyncio.run(seed(store, "u-late", "th-late", "I keep bees on the roof."))
        completed = {"Records": [sqs_record(run_completed("u-late", "th-late", "run-late"))]}
        noted = handler.handle(completed, FakeLambdaContext())  # type: ignore[arg-type]
        assert noted["batchItemFailures"] == []
        [due] = due_records()
        asked = len(model.requests)  # the thread's title was asked for with the run-completed event
        model.turns.append(Turn(text=["thinking "] * 20, delay_s=0.5))
        # WHEN the due extraction is handled with 3 s left
        response = handler.handle({"Records": [due]}, AlmostOutOfTime())  # type: ignore[arg-type]
    finally:
        handler.close()
    # THEN the slow model was asked (the run reached it: the deadline stopped a running model, not the set-up)
    assert model.turns == [] and len(model.requests) == asked + 1
    # AND the memory run ended itself with run_deadline (not killed by the platform), and SQS retries the record
    assert len(response["batchItemFailures"]) == 1
    run = asyncio.run(store.runs.get_run(TENANT, memory_run_id(TENANT, "th-late", 1, 1)))
    assert run is not None and (run.status, run.error_code) == (RunStatus.FAILED, "run_deadline")
