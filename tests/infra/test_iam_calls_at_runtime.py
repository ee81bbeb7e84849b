"""The other half of least privilege: every AWS call a function really makes is granted to its role.

``test_iam_least_privilege.py`` proves no role has an action the code does not call. Trimming grants that way risks
the opposite mistake, a call the role no longer allows, which a real account answers with ``AccessDenied`` while
moto (which checks no IAM) lets it pass. Here each function's work runs on moto and a real redis-server with every
botocore call recorded (``BaseClient._make_api_call``), each call is turned into the IAM action and resource it
needs (a transaction item by item, a query on an index as the index), and the set must be inside what the expanded
template grants that function's role.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import boto3
import botocore.client
import pytest

from functions.memory_extract.handler import MemoryExtractHandler
from shared.adapters.aws.memory_store import DynamoDBMemoryStore
from shared.memory.models import Memory, MemoryKind
from shared.models import Identity
from shared.runs.sweeper import RunSweeper
from shared.wiring import ServiceOverrides, Services
from tests.support import automation_events as automation_case
from tests.support import dead_runs as death_case
from tests.support import memory_extract_events as memory_case
from tests.support.scripted_model import ScriptedModel, Turn
from tests.support.settings import REGION, TABLE, make_settings
from tests.support.tokens import bearer

from .iam_grants import MIGRATE_SELF, WEBHOOK_SECRETS, Grant, granted

Template = dict[str, Any]
BUS = "agent-test-bus"
WEBHOOK_SECRET_PREFIX = make_settings().webhook_secret_prefix
GROUP = "agent-test-automations"
BUCKET = "agent-test-attachments"
# An 1x1 PNG (the smallest a message may carry): the runs below store it and read it back.
PNG_1X1 = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082"
)
# The S3 operations the adapter calls and the IAM action each is authorised as (DeleteObjects: per key).
S3_ACTIONS = {
    "PutObject": "s3:PutObject",
    "GetObject": "s3:GetObject",
    "HeadObject": "s3:GetObject",
    "ListObjectsV2": "s3:ListBucket",
    "DeleteObjects": "s3:DeleteObject",
    "DeleteObject": "s3:DeleteObject",
}
TRANSACTION_ACTIONS = {
    "Put": "PutItem",
    "Update": "UpdateItem",
    "Delete": "DeleteItem",
    "ConditionCheck": "ConditionCheckItem",
}


def _table(name: str) -> str:
    return {TABLE: "AgentTable", memory_case.IDEMPOTENCY_TABLE: "IdempotencyTable"}[name]


def needs(service: str, operation: str, params: dict[str, Any]) -> set[Grant]:
    """The (IAM action, template resource) pairs one botocore call needs."""
    if service == "dynamodb":
        if operation == "TransactWriteItems":
            found = set()
            for item in params["TransactItems"]:
                ((kind, body),) = item.items()
                found.add((f"dynamodb:{TRANSACTION_ACTIONS[kind]}", _table(body["TableName"])))
            return found
        if operation in ("BatchGetItem", "BatchWriteItem"):
            return {(f"dynamodb:{operation}", _table(name)) for name in params["RequestItems"]}
        resource = _table(params["TableName"])
        if "IndexName" in params:
            resource += f"/index/{params['IndexName']}"
        return {(f"dynamodb:{operation}", resource)}
    if service == "events":
        return {(f"events:{operation}", "AgentEventBus")}
    if service == "scheduler":
        name = str(params.get("Name", ""))
        return {(f"scheduler:{operation}", "schedule/task-*" if name.startswith("task-") else f"schedule/{name}")}
    if service == "sqs":
        return {(f"sqs:{operation}", "MemoryQueue" if params.get("QueueUrl", "").endswith("/agent-memory") else "?")}
    if service == "s3":
        assert params.get("Bucket") == BUCKET, params
        if operation == "CopyObject":
            return {("s3:GetObject", "AttachmentsBucket/*"), ("s3:PutObject", "AttachmentsBucket/*")}
        target = "AttachmentsBucket" if operation == "ListObjectsV2" else "AttachmentsBucket/*"
        return {(S3_ACTIONS.get(operation, f"s3:{operation}"), target)}
    if service == "secretsmanager":
        name = str(params.get("SecretId") or params.get("Name") or "")
        # Each tenant's webhook signing secret (make_settings' WEBHOOK_SECRET_PREFIX), else the LLM key.
        secret = WEBHOOK_SECRETS if name.startswith(WEBHOOK_SECRET_PREFIX + "/") else "LlmApiKeySecret"
        return {(f"secretsmanager:{operation}", secret)}
    if service == "lambda" and operation == "Invoke":
        name = str(params.get("FunctionName", ""))
        return {("lambda:InvokeFunction", MIGRATE_SELF if name.endswith(":function:agent-test-migrate") else name)}
    return {(f"{service}:{operation}", "?")}


class CallLog:
    def __init__(self) -> None:
        self.recording = False
        self.needed: set[Grant] = set()
        self.operations: set[str] = set()


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> CallLog:
    log = CallLog()
    original = botocore.client.BaseClient._make_api_call

    def recording(self: Any, operation_name: str, api_params: dict[str, Any]) -> Any:
        if log.recording:
            log.needed |= needs(self.meta.service_model.service_name, operation_name, api_params)
            log.operations.add(operation_name)
        return original(self, operation_name, api_params)

    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", recording)
    return log


@contextmanager
def recorded(log: CallLog) -> Iterator[None]:
    log.recording = True
    try:
        yield
    finally:
        log.recording = False


def aws_sqs() -> Any:
    return boto3.client("sqs", region_name=REGION)


def attachment_bucket() -> str:
    boto3.client("s3", region_name=REGION).create_bucket(Bucket=BUCKET)
    return BUCKET


def with_image(text: str) -> list[dict[str, Any]]:
    image = {"type": "data", "value": base64.b64encode(PNG_1X1).decode(), "mimeType": "image/png"}
    return [{"type": "text", "text": text}, {"type": "image", "source": image}]


def _denied(expanded_template: Template, role: str, log: CallLog) -> set[Grant]:
    return log.needed - granted(expanded_template)[role]


async def test_the_sweeper_calls_only_what_its_role_grants(
    expanded_template: Template, calls: CallLog, store: Any, redis_stream: Any
) -> None:
    # GIVEN a run whose process died during a tool call
    await death_case.leave_a_dead_run(store, redis_stream, death_case.DeadRun("th-iam", "run-iam"), died_while="tool")
    # WHEN the sweeper ends it
    with recorded(calls):
        report = await RunSweeper(store.threads, store.runs, store.audit, redis_stream).sweep()
    # THEN it did its whole repair, and every call it made is granted to SweeperRole
    assert report.ended == ["run-iam"] and report.repaired_tool_calls == 1
    assert ("dynamodb:Query", "AgentTable/index/GSI2") in calls.needed
    assert _denied(expanded_template, "SweeperRole", calls) == set()


async def test_a_chat_run_calls_only_what_the_streaming_role_grants(
    expanded_template: Template, calls: CallLog, store: Any, redis_stream: Any, asgi_client: Any, aws: Any
) -> None:
    boto3.client("events", region_name=REGION).create_event_bus(Name=BUS)
    model = ScriptedModel(
        Turn(text=["Checking. "], tool_calls=[("call_1", "get_current_time", '{"timezone": "UTC"}')]),
        Turn(text=["It is noon."]),
    )
    services = Services(
        make_settings(event_bus_name=BUS, attachments_bucket=attachment_bucket()),
        overrides=ServiceOverrides(store=store, stream=redis_stream, model=model),
    )
    # an upload of the user's (created by the buffered API), attached by this run: HEAD, GET, then PUT under the thread
    upload_id = f"{'0' * 32}-{len(PNG_1X1)}"
    boto3.client("s3", region_name=REGION).put_object(
        Bucket=BUCKET, Key=f"uploads/tenant-1/user-1/{upload_id}", Body=PNG_1X1, ContentType="image/png"
    )
    uploaded = {"type": "image", "source": {"type": "url", "value": f"agent-upload://{upload_id}"}}
    message = {"id": "m1", "role": "user", "content": [*with_image("time?"), uploaded]}
    body = {"threadId": "th-s", "runId": "run-s", "messages": [message]}
    # WHEN a user runs the agent and reads the run's events again
    with recorded(calls):
        async with asgi_client(services) as client:
            run = await client.post("/api/v1/agent", json=body, headers=bearer())
            replay = await client.get("/api/v1/agent/runs/run-s/events", headers=bearer())
            await services.runs.wait_idle()
    # THEN the run completed and was announced, and every call is granted to StreamingApiRole
    assert "RUN_FINISHED" in run.text and "RUN_FINISHED" in replay.text
    assert ("events:PutEvents", "AgentEventBus") in calls.needed
    # the image was stored at intake and read back for the model, the upload looked up, read and copied
    assert {("s3:PutObject", "AttachmentsBucket/*"), ("s3:GetObject", "AttachmentsBucket/*")} <= calls.needed
    assert calls.operations >= {"HeadObject", "GetObject", "PutObject"}
    # a chat turn reads no message id: admission's newest page places them (shared/runs/known_ids.py); the grant
    # stays for the runs that read none (automation) and the last-resort close of a failed run
    assert ("dynamodb:BatchGetItem", "AgentTable") not in calls.needed
    assert _denied(expanded_template, "StreamingApiRole", calls) == set()


async def test_the_json_routes_call_only_what_the_buffered_role_grants(
    expanded_template: Template, calls: CallLog, store: Any, redis_stream: Any, asgi_client: Any, aws: Any
) -> None:
    # GIVEN a thread with a finished run, a memory, and a Scheduler group
    boto3.client("scheduler", region_name=REGION).create_schedule_group(Name=GROUP)
    settings = make_settings(
        scheduler_group_name=GROUP,
        scheduler_role_arn="arn:aws:iam::123456789012:role/scheduler",
        scheduler_dead_letter_arn="arn:aws:sqs:us-east-1:123456789012:dlq",
        automation_function_arn="arn:aws:lambda:us-east-1:123456789012:function:automation",
        attachments_bucket=attachment_bucket(),
    )
    services = Services(
        settings, overrides=ServiceOverrides(store=store, stream=redis_stream, model=ScriptedModel(Turn(text=["hi"])))
    )
    message = {"id": "m1", "role": "user", "content": with_image("hello")}
    body = {"threadId": "th-b", "runId": "run-b", "messages": [message]}
    memories = DynamoDBMemoryStore(TABLE, lambda: aws)
    await memories.put(
        Memory(
            id="mem-1",
            tenant_id="tenant-1",
            user_id="user-1",
            kind=MemoryKind.PROFILE,
            content="likes tea",
            confidence=0.9,
            evidence_quote="I like tea",
            source_message_ids=("m1",),
            run_id="run-b",
        )
    )
    audit_headers = bearer(scopes=("agent:audit",))
    async with asgi_client(services) as client:
        await client.post("/api/v1/agent", json=body, headers=bearer())
        await services.runs.wait_idle()
        # WHEN every buffered route is used
        with recorded(calls):
            statuses = [
                (await client.get("/api/v1/threads", headers=bearer())).status_code,
                (await client.get("/api/v1/threads/th-b/history", headers=bearer())).status_code,
                (await client.get("/api/v1/threads/th-b/messages/m1/parts/0", headers=bearer())).status_code,
                (await client.get("/api/v1/threads/th-b", headers=bearer())).status_code,
                (await client.patch("/api/v1/threads/th-b", json={"title": "t"}, headers=bearer())).status_code,
                (await client.post("/api/v1/threads/search", json={"query": "hello"}, headers=bearer())).status_code,
            ]
            leaf = (await client.get("/api/v1/threads/th-b/history", headers=bearer())).json()["leafMessageId"]
            feedback = f"/api/v1/threads/th-b/messages/{leaf}/feedback"
            statuses += [
                (
                    await client.put("/api/v1/threads/th-b/branch", json={"leafMessageId": leaf}, headers=bearer())
                ).status_code,
                (await client.post(feedback, json={"score": 1}, headers=bearer())).status_code,
                (await client.get("/api/v1/admin/feedback", headers=bearer(scopes=("agent:admin",)))).status_code,
                (await client.delete(feedback, headers=bearer())).status_code,
                (await client.get("/api/v1/threads/th-b/audit", headers=audit_headers)).status_code,
                (await client.post("/api/v1/agent/runs/run-b/cancel", headers=bearer())).status_code,
                (await client.get("/api/v1/memories", headers=bearer())).status_code,
                (await client.delete("/api/v1/memories/mem-1", headers=bearer())).status_code,
            ]
            created = await client.post(
                "/api/v1/automations",
                json={"name": "brief", "scheduleExpression": "rate(1 day)", "prompt": "summarise"},
                headers=bearer(),
            )
            task = f"/api/v1/automations/{created.json()['taskId']}"
            statuses += [
                created.status_code,
                (await client.get(task, headers=bearer())).status_code,
                (await client.get("/api/v1/automations", headers=bearer())).status_code,
                (await client.put(task, json={"enabled": False}, headers=bearer())).status_code,
                (await client.delete(task, headers=bearer())).status_code,
            ]
            # the thread's own routes, its runs, feedback on the answer, and the administrator's routes
            history = (await client.get("/api/v1/threads/th-b/history", headers=bearer())).json()
            answer = history["leafMessageId"]
            feedback = f"/api/v1/threads/th-b/messages/{answer}/feedback"
            admin = bearer(scopes=("agent:admin",))
            statuses += [
                (await client.get("/api/v1/threads/th-b", headers=bearer())).status_code,
                (await client.patch("/api/v1/threads/th-b", json={"title": "t"}, headers=bearer())).status_code,
                (await client.post("/api/v1/threads/search", json={"query": "t"}, headers=bearer())).status_code,
                (
                    await client.put("/api/v1/threads/th-b/branch", json={"leafMessageId": answer}, headers=bearer())
                ).status_code,
                (await client.get("/api/v1/threads/th-b/runs", headers=bearer())).status_code,
                (await client.get("/api/v1/agent/runs/run-b", headers=bearer())).status_code,
                (await client.post(feedback, json={"score": 1}, headers=bearer())).status_code,
                (await client.get("/api/v1/admin/feedback", headers=admin)).status_code,
                (await client.delete(feedback, headers=bearer())).status_code,
                (await client.get("/api/v1/admin/webhooks", headers=admin)).status_code,
                (await client.post("/api/v1/admin/webhooks/secret", headers=admin)).status_code,
                (await client.post("/api/v1/admin/webhooks/secret", headers=admin)).status_code,
                (await client.delete("/api/v1/admin/webhooks", headers=admin)).status_code,
            ]
            await client.post(
                "/api/v1/automations",
                json={"name": "b", "scheduleExpression": "rate(1 day)", "prompt": "p"},
                headers=bearer(),
            )
            statuses += [
                (await client.delete("/api/v1/threads/th-b", headers=bearer())).status_code,
                (await client.delete("/api/v1/me", headers=bearer(scopes=("agent:erase",)))).status_code,
            ]
    # THEN each worked, and every call is granted to BufferedApiRole
    assert [(i, s) for i, s in enumerate(statuses) if s >= 300] == []
    assert ("dynamodb:DeleteItem", "AgentTable") in calls.needed
    assert ("dynamodb:BatchWriteItem", "AgentTable") in calls.needed
    assert ("scheduler:CreateSchedule", "schedule/task-*") in calls.needed
    # the parts route read the image; the thread's erasure listed its prefix and deleted it
    assert {
        ("s3:GetObject", "AttachmentsBucket/*"),
        ("s3:ListBucket", "AttachmentsBucket"),
        ("s3:DeleteObject", "AttachmentsBucket/*"),
    } <= calls.needed
    assert boto3.client("s3", region_name=REGION).list_objects_v2(Bucket=BUCKET)["KeyCount"] == 0
    assert _denied(expanded_template, "BufferedApiRole", calls) == set()


def test_memory_extraction_calls_only_what_the_memory_role_grants(
    expanded_template: Template, calls: CallLog, store: Any, aws: Any, redis_url: str
) -> None:
    # GIVEN a thread where the user said something worth remembering, and the idempotency table
    aws.create_table(
        TableName=memory_case.IDEMPOTENCY_TABLE,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
    )
    queue_url = aws_sqs().create_queue(QueueName="agent-memory")["QueueUrl"]
    asyncio.run(memory_case.seed(store, "user-m", "th-m", "I am vegetarian."))
    services = Services(
        make_settings(
            redis_url=redis_url,
            idempotency_table_name=memory_case.IDEMPOTENCY_TABLE,
            memory_queue_url=queue_url,
            memory_idle_s=0,
        ),
        overrides=ServiceOverrides(store=store, model=memory_case.RaisingScriptedModel()),
    )
    handler = MemoryExtractHandler(services)
    event = {"Records": [memory_case.sqs_record(memory_case.run_completed("user-m", "th-m", "run-m"))]}
    try:
        # WHEN the memory function handles the run-completed record, then the "extraction due" message it sent
        with recorded(calls):
            noted = handler.handle(event, memory_case.FakeLambdaContext())
        dues = memory_case.due_records()  # the test reads the queue (not the function's call)
        with recorded(calls):
            response = handler.handle({"Records": dues}, memory_case.FakeLambdaContext())
    finally:
        handler.close()
    # THEN it noted the run, sent one due message, extracted without a failed record, and every call is granted
    assert noted == {"batchItemFailures": []} and len(dues) == 1
    assert response == {"batchItemFailures": []}
    assert ("sqs:SendMessage", "MemoryQueue") in calls.needed
    assert asyncio.run(DynamoDBMemoryStore(TABLE, lambda: aws).list_memories(memory_case.TENANT, "user-m")), (
        "nothing was extracted"
    )
    assert ("dynamodb:PutItem", "IdempotencyTable") in calls.needed
    assert _denied(expanded_template, "MemoryRole", calls) == set()


@pytest.fixture
def fresh_container(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A cold container: its own event loop, closed after (as tests/integration/test_automation_handler.py)."""
    from shared import container

    monkeypatch.setattr(container, "_loop", None)
    yield
    if container._loop is not None:
        container._loop.close()


@pytest.mark.usefixtures("fresh_container")
def test_a_scheduled_fire_calls_only_what_the_automation_role_grants(
    expanded_template: Template, calls: CallLog, store: Any, aws: Any
) -> None:
    from devtools.local.embedded import embedded_stream_client
    from functions.automation import handler
    from shared.adapters.redis_stream import RedisEventStream
    from shared.automation.models import AutomationTaskSpec

    # GIVEN a task (created beforehand by the API) and a run-completed bus
    boto3.client("scheduler", region_name=REGION).create_schedule_group(Name=automation_case.GROUP)
    boto3.client("events", region_name=REGION).create_event_bus(Name=BUS)
    services = Services(
        make_settings(**automation_case.SCHEDULER_SETTINGS, event_bus_name=BUS),
        overrides=ServiceOverrides(
            store=store,
            stream=RedisEventStream(embedded_stream_client()),
            model=ScriptedModel(fallback=lambda _req: Turn(text=["done"])),
        ),
    )
    owner = Identity(tenant_id="tenant-1", user_id="user-1")
    spec = AutomationTaskSpec(name="Briefing", schedule_expression="rate(1 day)", prompt=automation_case.PROMPT)
    task = asyncio.run(services.automation_service.create(owner, spec))
    schedule = automation_case.stored_input(boto3.client("scheduler", region_name=REGION), task.task_id)
    event = automation_case.as_delivered(schedule, scheduled_time="2026-01-05T08:00:00Z", execution_id="x")
    # WHEN the Scheduler's fire reaches the function
    with recorded(calls):
        outcome = handler.lambda_handler(event, automation_case.LambdaContext(), services)
    # THEN the task ran, and every call is granted to AutomationRole
    assert outcome["status"] == "succeeded"
    assert ("events:PutEvents", "AgentEventBus") in calls.needed
    assert _denied(expanded_template, "AutomationRole", calls) == set()


def test_a_migration_chain_calls_only_what_the_migration_role_grants(
    expanded_template: Template, calls: CallLog, aws: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from moto.core.config import default_user_config

    from functions.migrate.handler import STOP_BEFORE_TIMEOUT_MS, lambda_handler
    from shared.adapters.aws.clients import client_factory
    from shared.adapters.aws.function_invoker import LambdaInvoker
    from tests.support.lambda_functions import lambda_function
    from tests.support.migration_context import LambdaContext
    from tests.support.old_shapes import before_index, memory, seed

    # GIVEN old-shape memories, and the function in moto's Lambda (which queues an invocation, running nothing)
    monkeypatch.setitem(default_user_config, "lambda", {"use_docker": False})
    seed(aws, TABLE, [before_index(memory(i, user="alice", active=True)) for i in range(30)])
    arn = lambda_function("agent-test-migrate")
    invoker = LambdaInvoker(client_factory("lambda", region=REGION))
    services = Services(make_settings(), overrides=ServiceOverrides(function_invoker=invoker))
    # WHEN an invocation runs out of time part-way (and invokes itself), and the next one finishes the migration
    with recorded(calls):
        event = {"action": "run", "page_size": 5, "rate_wcu": 10_000}
        first = lambda_handler(event, LambdaContext(STOP_BEFORE_TIMEOUT_MS + 1_000, arn, step_ms=1_000), services)
        second = lambda_handler({**event, "hop": 1}, LambdaContext(900_000, arn, aws_request_id="r2"), services)
    # THEN it scanned, wrote, checkpointed and invoked itself, and every call is granted to MigrationRole
    assert first["reinvoked"] and second["finished"]
    assert {("dynamodb:Scan", "AgentTable"), ("lambda:InvokeFunction", MIGRATE_SELF)} <= calls.needed
    assert _denied(expanded_template, "MigrationRole", calls) == set()
