"""Contract of the ``DueQueue`` port: the same cases on the in-memory fake and the SQS adapter (moto). The consumer
gets back the message that was sent; a delayed message stays invisible until its delay passed."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import boto3
import pytest
from moto import mock_aws

from shared.adapters.aws.sqs_due_queue import SqsDueQueue
from shared.adapters.in_memory.due_queue import InMemoryDueQueue
from shared.memory.coalescing import ExtractionDue
from shared.memory.ports import DueQueue
from shared.models import utc_now
from tests.support.settings import REGION


@dataclass
class Backend:
    queue: DueQueue
    visible_now: Callable[[], list[ExtractionDue]]


def due(generation: int = 1) -> ExtractionDue:
    body = {"tenantId": "t1", "userId": "u1", "threadId": "th-1", "generation": generation}
    return ExtractionDue.model_validate(body)


@pytest.fixture(params=["memory", "sqs"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    if request.param == "memory":
        fake = InMemoryDueQueue()
        yield Backend(fake, fake.receive)
        return
    with mock_aws():
        sqs: Any = boto3.client("sqs", region_name=REGION)
        url = sqs.create_queue(QueueName="agent-memory")["QueueUrl"]

        def visible_now() -> list[ExtractionDue]:
            messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
            for m in messages:
                sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
            return [ExtractionDue.model_validate_json(m["Body"]) for m in messages]

        yield Backend(SqsDueQueue(url, lambda: sqs), visible_now)


async def test_a_message_without_delay_reaches_the_consumer_whole(backend: Backend) -> None:
    sent = due(3)
    await backend.queue.send(sent, delay_s=0)
    assert backend.visible_now() == [sent]
    assert backend.visible_now() == []


async def test_a_delayed_message_is_not_visible_before_its_delay(backend: Backend) -> None:
    await backend.queue.send(due(1), delay_s=120)
    await backend.queue.send(due(2), delay_s=0)
    assert [d.generation for d in backend.visible_now()] == [2]


async def test_a_delay_beyond_the_queues_limit_is_clamped_not_refused(backend: Backend) -> None:
    await backend.queue.send(due(1), delay_s=5_000)
    await backend.queue.send(due(2), delay_s=-5)
    assert [d.generation for d in backend.visible_now()] == [2]


async def test_the_fakes_delayed_message_becomes_visible_once_its_delay_passed() -> None:
    # fake only: moto keeps real time, so waiting out a delay there would take minutes
    fake = InMemoryDueQueue()
    await fake.send(due(1), delay_s=900)
    assert fake.receive(utc_now() + timedelta(seconds=899)) == []
    assert [d.generation for d in fake.receive(utc_now() + timedelta(seconds=901))] == [1]
