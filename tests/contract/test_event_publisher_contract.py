"""Contract of the ``EventPublisher`` port: the same cases on the in-memory fake and the EventBridge adapter (moto,
where a rule on the bus routes the events to an SQS queue, as template.yaml wires the memory queue)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from moto import mock_aws

from shared.adapters.aws.eventbridge import EventBridgePublisher
from shared.adapters.in_memory.publisher import InMemoryEventPublisher
from shared.memory.models import BusEvent
from shared.memory.ports import EventPublisher
from shared.memory.trigger import run_completed_event
from tests.support.settings import REGION

BUS = "agent-events-test"


@dataclass
class Backend:
    publisher: EventPublisher
    delivered: Any  # () -> list of (source, detail type, detail) that reached the bus's subscribers


def completed(i: int) -> BusEvent:
    return run_completed_event(
        tenant_id="t1", user_id="u1", thread_id=f"th-{i}", run_id=f"run-{i}", executor="worker", status="succeeded"
    )


@pytest.fixture(params=["memory", "eventbridge"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    if request.param == "memory":
        fake = InMemoryEventPublisher()
        yield Backend(fake, lambda: [(e.source, e.detail_type, e.detail) for e in fake.published])
        return
    with mock_aws():
        events = boto3.client("events", region_name=REGION)
        sqs = boto3.client("sqs", region_name=REGION)
        events.create_event_bus(Name=BUS)
        queue_url = sqs.create_queue(QueueName="bus-tap")["QueueUrl"]
        queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        events.put_rule(Name="everything", EventBusName=BUS, EventPattern=json.dumps({"source": [{"prefix": ""}]}))
        events.put_targets(Rule="everything", EventBusName=BUS, Targets=[{"Id": "tap", "Arn": queue_arn}])

        def delivered() -> list[tuple[str, str, dict[str, Any]]]:
            out = []
            while batch := sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10).get("Messages", []):
                for message in batch:
                    event = json.loads(message["Body"])
                    out.append((event["source"], event["detail-type"], event["detail"]))
                    sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])
            return out

        yield Backend(EventBridgePublisher(BUS, lambda: events), delivered)


def by_run(delivered: list[tuple[str, str, dict[str, Any]]]) -> list[tuple[str, str, dict[str, Any]]]:
    """The bus promises no order between entries: compare them sorted by run id."""
    return sorted(delivered, key=lambda item: str(item[2].get("runId")))


async def test_an_accepted_event_reaches_the_bus_with_its_source_type_and_detail(backend: Backend) -> None:
    event = completed(1)
    assert await backend.publisher.publish([event]) == []
    assert backend.delivered() == [(event.source, event.detail_type, event.detail)]


async def test_more_events_than_one_put_events_call_takes_all_arrive_once(backend: Backend) -> None:
    batch = [completed(i) for i in range(23)]  # put_events takes 10 entries per call
    assert await backend.publisher.publish(batch) == []
    assert by_run(backend.delivered()) == by_run([(e.source, e.detail_type, e.detail) for e in batch])


async def test_publishing_nothing_sends_nothing(backend: Backend) -> None:
    assert await backend.publisher.publish([]) == []
    assert backend.delivered() == []


async def test_non_ascii_detail_arrives_unchanged(backend: Backend) -> None:
    event = BusEvent(source="agent-backend", detail_type="agent.run.completed", detail={"runId": "r-é", "note": "日本"})
    assert await backend.publisher.publish([event]) == []
    assert backend.delivered() == [("agent-backend", "agent.run.completed", {"runId": "r-é", "note": "日本"})]


async def test_the_fake_reports_refused_entries_by_index_as_put_events_does() -> None:
    # fake only: moto accepts every well-formed entry, so the refusal path is the fake's, checked here
    fake = InMemoryEventPublisher(reject=frozenset({"refused.type"}))
    refused = BusEvent(source="agent-backend", detail_type="refused.type", detail={})
    failures = await fake.publish([completed(0), refused, completed(2)])
    assert [f.index for f in failures] == [1]
    assert [e.detail["runId"] for e in fake.published] == ["run-0", "run-2"]
