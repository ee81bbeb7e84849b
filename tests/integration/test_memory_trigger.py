"""Publishing "run completed": moto's EventBridge bus routes it through a rule to SQS; failures are retried,
logged and never raised."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Sequence
from typing import Any

import boto3
import pytest
from moto import mock_aws

from functions.memory_extract.handler import MemoryQueueRecord
from shared.adapters.aws.eventbridge import EventBridgePublisher
from shared.executors.context import RunContext
from shared.executors.worker import ExecutionResult
from shared.memory.models import BusEvent, PublishFailure
from shared.memory.trigger import MEMORY_DETAIL_TYPES, RunCompletedPublisher, run_completed_event
from shared.models import ExecutionMeta, ExecutorKind, Identity, Origin, RunStatus
from shared.profiles import default_catalog
from tests.support.settings import REGION

BUS = "agent-events-test"


@pytest.fixture
def bus_to_queue() -> Iterator[tuple[Any, str]]:
    """A bus, a rule matching run-completed events and an SQS queue as its target (as template.yaml wires it)."""
    with mock_aws():
        events = boto3.client("events", region_name=REGION)
        sqs = boto3.client("sqs", region_name=REGION)
        events.create_event_bus(Name=BUS)
        queue_url = sqs.create_queue(QueueName="agent-memory")["QueueUrl"]
        queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        events.put_rule(
            Name="run-completed",
            EventBusName=BUS,
            EventPattern=json.dumps({"source": ["agent-backend"], "detail-type": list(MEMORY_DETAIL_TYPES)}),
        )
        events.put_targets(Rule="run-completed", EventBusName=BUS, Targets=[{"Id": "memory", "Arn": queue_arn}])
        yield sqs, queue_url


def received(sqs: Any, queue_url: str) -> list[dict[str, Any]]:
    resp = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=0)
    return list(resp.get("Messages", []))


def worker_ctx(executor: ExecutorKind = ExecutorKind.WORKER) -> RunContext:
    profile = default_catalog().get("chat_default")
    return RunContext(
        identity=Identity(tenant_id="tenant-1", user_id="user-1"),
        thread_id="th-1",
        run_id="run-1",
        profile=profile,
        meta=ExecutionMeta(origin=Origin.CHAT, executor=executor),
    )


class FlakyPublisher:
    """Wraps the real adapter; the first ``failures`` calls report every entry failed (or raise)."""

    def __init__(self, inner: EventBridgePublisher, failures: int, *, raise_instead: bool = False) -> None:
        self.inner = inner
        self.failures = failures
        self.raise_instead = raise_instead
        self.calls = 0

    async def publish(self, events: Sequence[BusEvent]) -> list[PublishFailure]:
        self.calls += 1
        if self.calls <= self.failures:
            if self.raise_instead:
                raise ConnectionError("endpoint unreachable")
            return [PublishFailure(i, "ThrottlingException", "Rate exceeded") for i in range(len(events))]
        return await self.inner.publish(events)


def publisher_for(bus: str) -> EventBridgePublisher:
    return EventBridgePublisher(bus, lambda: boto3.client("events", region_name=REGION))


def trigger_logs(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "shared.memory.trigger"]


async def no_sleep(_seconds: float) -> None:
    return None


async def test_run_completed_event_arrives_on_the_queue_and_parses(bus_to_queue: tuple[Any, str]) -> None:
    sqs, queue_url = bus_to_queue
    publisher = RunCompletedPublisher(publisher_for(BUS))
    # WHEN a worker run finishes (through the RunService hook)
    await publisher.hook()(worker_ctx(), RunStatus.SUCCEEDED, ExecutionResult())
    # THEN the event is on the queue, in the shape the memory handler's Parser model accepts
    [message] = received(sqs, queue_url)
    body = json.loads(message["Body"])
    assert body["source"] == "agent-backend" and body["detail-type"] == "agent.run.completed"
    assert body["detail"] == {
        "tenantId": "tenant-1",
        "userId": "user-1",
        "threadId": "th-1",
        "runId": "run-1",
        "executor": "worker",
        "status": "succeeded",
        "outcome": {"type": "success"},  # for the run's webhook (shared.webhooks); the memory path ignores it
    }
    record = MemoryQueueRecord.model_validate(
        {
            "messageId": message["MessageId"],
            "receiptHandle": message["ReceiptHandle"],
            "body": message["Body"],
            "attributes": {
                "ApproximateReceiveCount": "1",
                "SentTimestamp": "1767225600000",
                "SenderId": "AIDAIENQZJOLO23YVJ4VO",
                "ApproximateFirstReceiveTimestamp": "1767225600001",
            },
            "messageAttributes": {},
            "md5OfBody": message["MD5OfBody"],
            "eventSource": "aws:sqs",
            "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:agent-memory",
            "awsRegion": REGION,
        }
    )
    assert record.body.detail.run_id == "run-1" and record.body.id == body["id"]


async def test_memory_runs_publish_nothing(bus_to_queue: tuple[Any, str]) -> None:
    sqs, queue_url = bus_to_queue
    published = await RunCompletedPublisher(publisher_for(BUS)).run_completed(
        worker_ctx(ExecutorKind.MEMORY), RunStatus.SUCCEEDED
    )
    assert published is False and received(sqs, queue_url) == []


@pytest.mark.parametrize("raise_instead", [False, True], ids=["failed-entry-count", "client-raises"])
async def test_failed_entries_are_retried_and_logged(
    bus_to_queue: tuple[Any, str], caplog: pytest.LogCaptureFixture, raise_instead: bool
) -> None:
    sqs, queue_url = bus_to_queue
    flaky = FlakyPublisher(publisher_for(BUS), failures=2, raise_instead=raise_instead)
    delays: list[float] = []

    async def record_sleep(seconds: float) -> None:
        delays.append(seconds)

    publisher = RunCompletedPublisher(flaky, sleep=record_sleep)
    with caplog.at_level(logging.WARNING, logger="shared.memory.trigger"):
        ok = await publisher.run_completed(worker_ctx(), RunStatus.SUCCEEDED)
    # THEN the third attempt got through, after two logged failures and a growing backoff
    assert ok is True and flaky.calls == 3
    assert delays == [0.2, 0.4]
    assert [r.getMessage() for r in trigger_logs(caplog)] == ["event publish failed; retrying"] * 2
    assert len(received(sqs, queue_url)) == 1


async def test_a_publish_that_keeps_failing_is_logged_and_never_raises(
    bus_to_queue: tuple[Any, str], caplog: pytest.LogCaptureFixture
) -> None:
    sqs, queue_url = bus_to_queue
    flaky = FlakyPublisher(publisher_for(BUS), failures=99)
    with caplog.at_level(logging.WARNING, logger="shared.memory.trigger"):
        await RunCompletedPublisher(flaky, sleep=no_sleep).hook()(worker_ctx(), RunStatus.SUCCEEDED, ExecutionResult())
    assert flaky.calls == 3
    assert trigger_logs(caplog)[-1].levelno == logging.ERROR
    assert trigger_logs(caplog)[-1].getMessage() == "event publish failed; giving up"
    assert received(sqs, queue_url) == []


GOOD = run_completed_event(
    tenant_id="t", user_id="u", thread_id="th", run_id="r", executor="worker", status="succeeded"
)
BAD = BusEvent(source="", detail_type="agent.run.completed", detail={"runId": "bad"})  # moto: InvalidArgument


async def test_put_events_failed_entry_count_is_read_per_entry(bus_to_queue: tuple[Any, str]) -> None:
    # GIVEN one valid entry and one EventBridge refuses (moto reports it in FailedEntryCount, without raising)
    failures = await publisher_for(BUS).publish([GOOD, BAD])
    # THEN exactly the refused entry is reported, and the valid one was delivered
    assert [(f.index, f.code) for f in failures] == [(1, "InvalidArgument")]
    sqs, queue_url = bus_to_queue
    assert len(received(sqs, queue_url)) == 1


async def test_only_the_failed_entries_are_retried(
    bus_to_queue: tuple[Any, str], caplog: pytest.LogCaptureFixture
) -> None:
    sqs, queue_url = bus_to_queue
    with caplog.at_level(logging.WARNING, logger="shared.memory.trigger"):
        ok = await RunCompletedPublisher(publisher_for(BUS), sleep=no_sleep).publish([GOOD, BAD])
    # THEN the refused entry was tried three times and given up (logged), the good one was delivered once
    assert ok is False
    assert [r.getMessage() for r in trigger_logs(caplog)] == ["event publish failed; retrying"] * 2 + [
        "event publish failed; giving up"
    ]
    assert trigger_logs(caplog)[-1].__dict__["error_codes"] == ["InvalidArgument"]
    assert len(received(sqs, queue_url)) == 1
