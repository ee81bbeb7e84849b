"""What the memory_extract function receives and reads, built as AWS delivers it: SQS records wrapping EventBridge
events, the "extraction due" messages on moto's SQS, a seeded thread, and a model that proposes one memory per new user
message. Shared by the handler's integration tests and the IAM check of the calls it makes."""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

import boto3

from shared.adapters.aws.dynamodb_store import DynamoDBStore
from shared.errors import ModelError
from shared.llm.types import ChatRequest
from shared.models import Identity, Message, Role
from tests.support.scripted_model import ScriptedModel, Turn
from tests.support.settings import REGION

IDEMPOTENCY_TABLE = "agent-test-idempotency"
TENANT = f"tenant-mem-{uuid.uuid4().hex[:8]}"  # the redis-server is shared by the session: own stream keys
NEW_USER_MESSAGE = re.compile(r'<message id="([^"]+)" role="user" new="true">(.*?)</message>', re.S)


@dataclass
class FakeLambdaContext:
    function_name: str = "memory-extract"
    memory_limit_in_mb: int = 1024
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:memory-extract"
    aws_request_id: str = "req-1"

    def get_remaining_time_in_millis(self) -> int:
        return 120_000


def memory_model(request: ChatRequest) -> Turn:
    """A model at the port that behaves like a careful memory model: it proposes one memory per new user
    message, quoting it, and says "done" once it has seen the tool results."""
    if any(m.role == "tool" for m in request.messages):
        return Turn(text=["done"])
    prompt = request.messages[-1].content or ""
    if "please fail" in prompt:
        raise ModelError("the model endpoint is down", code="model_unavailable")
    calls = [
        (
            f"call_{mid}",
            "memory_write",
            json.dumps(
                {
                    "kind": "profile",
                    "content": text,
                    "confidence": 0.9,
                    "evidence_quote": text,
                    "source_message_ids": [mid],
                }
            ),
        )
        for mid, text in NEW_USER_MESSAGE.findall(prompt)
    ]
    return Turn(tool_calls=calls)


class RaisingScriptedModel(ScriptedModel):
    """ScriptedModel whose fallback may raise (a model error on one thread)."""

    def __init__(self) -> None:
        super().__init__(fallback=memory_model)


def sqs_record(body: str, *, receive_count: int = 1) -> dict[str, Any]:
    """An SQS record as Lambda receives it (the shape of ``sam local generate-event sqs receive-message``)."""
    return {
        "messageId": str(uuid.uuid4()),
        "receiptHandle": "AQEBwJnKyrHigUMZj6rYigCgxlaS3SLy0a",
        "body": body,
        "attributes": {
            "ApproximateReceiveCount": str(receive_count),
            "SentTimestamp": "1767225600000",
            "SenderId": "AIDAIENQZJOLO23YVJ4VO",
            "ApproximateFirstReceiveTimestamp": "1767225600001",
        },
        "messageAttributes": {},
        "md5OfBody": hashlib.md5(body.encode()).hexdigest(),  # SQS's own checksum of the body
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:agent-memory",
        "awsRegion": REGION,
    }


def run_completed(
    user: str, thread: str, run: str, *, event_id: str | None = None, status: str = "succeeded"
) -> str:
    """An EventBridge event as a rule delivers it to SQS (no ``account``, as moto delivers it)."""
    return json.dumps(
        {
            "version": "0",
            "id": event_id or str(uuid.uuid4()),
            "detail-type": "agent.run.completed",
            "source": "agent-backend",
            "time": "2026-01-01T00:00:00Z",
            "region": REGION,
            "resources": [],
            "detail": {
                "tenantId": TENANT,
                "userId": user,
                "threadId": thread,
                "runId": run,
                "executor": "worker",
                "status": status,
            },
        }
    )


async def seed(store: DynamoDBStore, user: str, thread: str, said: str) -> None:
    identity = Identity(tenant_id=TENANT, user_id=user)
    await store.threads.open_thread(identity, thread)
    await store.threads.append_messages(
        identity,
        thread,
        [
            Message(id=f"{thread}-u1", thread_id=thread, role=Role.USER, content=said),
            Message(id=f"{thread}-a1", thread_id=thread, role=Role.ASSISTANT, content="Good to know!"),
        ],
    )


def due_records() -> list[dict[str, Any]]:
    """The "extraction due" messages waiting on the memory queue, as SQS records (removed from the queue)."""
    sqs = boto3.client("sqs", region_name=REGION)
    url = sqs.get_queue_url(QueueName="agent-memory")["QueueUrl"]
    records = []
    while messages := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", []):
        for m in messages:
            records.append(sqs_record(m["Body"]))
            sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    return records
