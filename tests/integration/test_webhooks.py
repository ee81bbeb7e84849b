"""Signed webhooks when a run ends: a chat run naming ``forwardedProps.webhook`` is POSTed its status document,
signed the Standard Webhooks way (verified with the reference library), through moto's EventBridge rule, the
webhook queue and the webhook function; a 500 is retried with backoff; an inside address is never contacted."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator, Sequence
from typing import Any

import boto3
import pytest
from standardwebhooks import Webhook

from functions.webhook_delivery.handler import WebhookHandler, backoff_s
from shared.adapters.in_memory.audit import InMemoryAuditLog
from shared.adapters.in_memory.runs import InMemoryRunLedger
from shared.adapters.in_memory.webhook_secrets import InMemoryWebhookSecrets
from shared.adapters.webhook_http import HttpWebhookPoster
from shared.memory.trigger import RUN_COMPLETED
from shared.models import Run, RunStatus, Usage
from shared.webhooks.delivery import AUDIT_KIND, RunEnded, WebhookDelivery, webhook_id
from shared.wiring import ServiceOverrides, Services
from tests.support.chat_requests import post_run, run_body, user
from tests.support.lambda_events import LambdaContext
from tests.support.memory_extract_events import sqs_record
from tests.support.scripted_model import ScriptedModel, Turn
from tests.support.settings import REGION, make_settings
from tests.support.tokens import bearer
from tests.support.webhook_receiver import WebhookReceiver, webhook_receiver

BUS = "agent-events-webhooks"
TENANT = "tenant-1"


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with webhook_receiver() as state:
        yield state


@pytest.fixture
def webhook_queue(aws: Any) -> tuple[Any, str]:
    """The bus, a rule on run-ended events and the webhook queue with its dead-letter queue (as template.yaml)."""
    events = boto3.client("events", region_name=REGION)
    sqs = boto3.client("sqs", region_name=REGION)
    events.create_event_bus(Name=BUS)
    dlq_url = sqs.create_queue(QueueName="agent-webhooks-dlq")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    queue_url = sqs.create_queue(
        QueueName="agent-webhooks",
        # A visibility timeout of 0: a record is hidden after a failure only by the function's own backoff.
        Attributes={
            "VisibilityTimeout": "0",
            "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": "8"}),
        },
    )["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    events.put_rule(
        Name="run-ended-webhooks",
        EventBusName=BUS,
        EventPattern=json.dumps({"source": ["agent-backend"], "detail-type": [RUN_COMPLETED]}),
    )
    events.put_targets(Rule="run-ended-webhooks", EventBusName=BUS, Targets=[{"Id": "webhooks", "Arn": queue_arn}])
    return sqs, queue_url


def lambda_records(sqs: Any, queue_url: str) -> list[dict[str, Any]]:
    """The queue's visible messages as the SQS event source hands them to the function."""
    resp = sqs.receive_message(
        QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=0, AttributeNames=["ApproximateReceiveCount"]
    )
    records = []
    for message in resp.get("Messages", []):
        record = sqs_record(message["Body"], receive_count=int(message["Attributes"]["ApproximateReceiveCount"]))
        record.update(messageId=message["MessageId"], receiptHandle=message["ReceiptHandle"])
        records.append(record)
    return records


def webhook_audit(records: Sequence[Any]) -> list[dict[str, Any]]:
    return [r.details for r in records if r.kind == AUDIT_KIND]


async def test_a_run_ends_with_a_signed_webhook_retried_after_a_500(
    store: Any, redis_stream: Any, asgi_client: Any, webhook_queue: tuple[Any, str], receiver: WebhookReceiver
) -> None:
    sqs, queue_url = webhook_queue
    services = Services(
        make_settings(event_bus_name=BUS, webhook_allow_loopback=True, webhook_queue_url=queue_url),
        overrides=ServiceOverrides(store=store, stream=redis_stream, model=ScriptedModel(Turn(text=["Hello."]))),
    )
    # GIVEN a receiver that fails its first delivery with a 500
    receiver.codes = [500]
    # WHEN a chat run names it as its webhook and ends
    body = run_body("th-wh", "run-wh", [user("m1", "hi")], forwardedProps={"webhook": receiver.url("/hook?t=1")})
    async with asgi_client(services) as client:
        status, frames = await post_run(client, body)
    assert status == 200 and frames[-1].json()["type"] == "RUN_FINISHED"
    # THEN nothing was sent on the run path: the run-ended event waits on the webhook queue
    assert receiver.received == []
    handler = WebhookHandler(services)  # (called in a thread below: a Lambda handler runs its own event loop)
    [record] = lambda_records(sqs, queue_url)
    # AND the webhook function's first attempt gets the 500: the record fails and is hidden for the backoff
    first = await asyncio.to_thread(handler.handle, {"Records": [record]}, LambdaContext())
    assert first == {"batchItemFailures": [{"itemIdentifier": record["messageId"]}]}
    assert len(receiver.received) == 1
    assert lambda_records(sqs, queue_url) == []  # invisible for backoff_s(1), not the queue's own timeout
    assert backoff_s(1) == 30 and backoff_s(2) == 60 and backoff_s(30) == 3600
    # (the backoff elapses)
    sqs.change_message_visibility(QueueUrl=queue_url, ReceiptHandle=record["receiptHandle"], VisibilityTimeout=0)
    [again] = lambda_records(sqs, queue_url)
    assert again["attributes"]["ApproximateReceiveCount"] == "2"
    second = await asyncio.to_thread(handler.handle, {"Records": [again]}, LambdaContext())
    assert second == {"batchItemFailures": []}
    # AND the second delivery verifies with the Standard Webhooks library and the tenant's secret
    first_try, delivered = receiver.received
    secret = await services.webhook_secrets.secret(TENANT)
    assert secret.startswith("whsec_")
    event = Webhook(secret).verify(delivered.body, delivered.headers)
    assert delivered.path == "/hook?t=1"
    assert event["type"] == "run.succeeded"
    document = event["data"]
    assert document["runId"] == "run-wh" and document["threadId"] == "th-wh"
    assert document["status"] == "succeeded" and document["outcome"] == {"type": "success"}
    assert document["usage"][0]["inputTokens"] > 0 and "endedAt" in document
    # AND both attempts carried the same webhook-id (a receiver drops the repeat), each signed for its own attempt
    assert (
        first_try.headers["webhook-id"]
        == delivered.headers["webhook-id"]
        == webhook_id("run-wh", receiver.url("/hook?t=1"))
    )
    # AND each attempt is audited on the run's thread, with the target's origin only (never its query)
    audit = webhook_audit(await services.audit_log.list_for_thread(TENANT, "th-wh", limit=50))
    assert sorted((a["attempt"], a["outcome"], a.get("statusCode")) for a in audit) == [
        (1, "failed", 500),
        (2, "delivered", 200),
    ]
    assert all(a["target"] == f"http://127.0.0.1:{receiver.port}" for a in audit)
    # AND the secret is the tenant's, in Secrets Manager
    stored = boto3.client("secretsmanager", region_name=REGION).get_secret_value(
        SecretId=f"agent-backend/webhooks/{TENANT}"
    )
    assert stored["SecretString"] == secret


async def test_a_loopback_webhook_is_refused_at_admission_without_the_dev_setting(
    make_services: Any, asgi_client: Any, receiver: WebhookReceiver
) -> None:
    services = make_services(ScriptedModel())
    body = run_body("th-bad", "run-bad", [user("m1", "hi")], forwardedProps={"webhook": receiver.url()})
    async with asgi_client(services) as client:
        status, [answer] = await post_run(client, body)
    error = answer["error"]
    assert status == 422
    assert error["code"] == "unsafe_url"
    assert error["details"][0]["loc"] == ["body", "forwardedProps", "webhook"]
    assert await services.run_ledger.get_run(TENANT, "run-bad") is None
    assert receiver.received == []


def ended_run(webhook: str, *, status: RunStatus = RunStatus.SUCCEEDED, error_code: str | None = None) -> Run:
    return Run(
        run_id="run-1",
        thread_id="th-1",
        tenant_id=TENANT,
        user_id="user-1",
        status=status,
        error_code=error_code,
        usage=[Usage(model="m", input_tokens=5, output_tokens=2)],
        webhook=webhook,
    )


def resolving_to(*addresses: str):  # type: ignore[no-untyped-def]
    async def resolver(host: str, port: int) -> Sequence[str]:
        return addresses

    return resolver


@pytest.mark.parametrize("address", ["127.0.0.1", "10.0.0.7", "169.254.169.254"])
async def test_a_target_that_now_resolves_inside_is_never_contacted(address: str, receiver: WebhookReceiver) -> None:
    # GIVEN a run whose webhook host was public at admission and now resolves to an inside address
    ledger, audit = InMemoryRunLedger(), InMemoryAuditLog()
    await ledger.create_run(ended_run(f"https://hooks.example.com:{receiver.port}/hook"))
    delivery = WebhookDelivery(
        ledger, audit, InMemoryWebhookSecrets(), HttpWebhookPoster(), resolver=resolving_to(address)
    )
    # WHEN it is delivered
    report = await delivery.deliver(RunEnded(TENANT, "th-1", "run-1"))
    # THEN nothing is sent, the refusal is audited, and it is not retried (deliver did not raise)
    assert receiver.received == []
    assert report.refused == [f"https://hooks.example.com:{receiver.port}"] and report.delivered == []
    [record] = webhook_audit(await audit.list_for_thread(TENANT, "th-1", limit=10))
    assert record["outcome"] == "refused" and "resolves to a" in record["reason"]


@pytest.mark.parametrize(
    ("status", "outcome", "error_code", "event_type"),
    [
        (RunStatus.SUCCEEDED, {"type": "interrupt", "interrupts": [{"id": "int-1", "reason": "approval"}]}, None,
         "run.interrupted"),
        (RunStatus.FAILED, None, "model_timeout", "run.failed"),
        (RunStatus.CANCELLED, None, None, "run.cancelled"),
    ],
)  # fmt: skip
async def test_the_event_type_follows_how_the_run_ended(
    status: RunStatus, outcome: Any, error_code: str | None, event_type: str, receiver: WebhookReceiver
) -> None:
    ledger, secrets = InMemoryRunLedger(), InMemoryWebhookSecrets()
    await ledger.create_run(ended_run(receiver.url(), status=status, error_code=error_code))
    delivery = WebhookDelivery(ledger, InMemoryAuditLog(), secrets, HttpWebhookPoster(), allow_loopback=True)
    await delivery.deliver(RunEnded(TENANT, "th-1", "run-1", outcome))
    [received] = receiver.received
    event = Webhook(await secrets.secret(TENANT)).verify(received.body, received.headers)
    assert event["type"] == event_type
    assert event["data"]["status"] == event_type.removeprefix("run.")
    if status is RunStatus.FAILED:
        assert event["data"]["error"]["code"] == "model_timeout" and "outcome" not in event["data"]
    else:
        assert event["data"]["outcome"] == (outcome or {"type": "cancelled"})


async def test_a_run_without_a_webhook_sends_nothing(receiver: WebhookReceiver) -> None:
    ledger, audit = InMemoryRunLedger(), InMemoryAuditLog()
    await ledger.create_run(ended_run(receiver.url()).model_copy(update={"webhook": None}))
    delivery = WebhookDelivery(ledger, audit, InMemoryWebhookSecrets(), HttpWebhookPoster(), allow_loopback=True)
    report = await delivery.deliver(RunEnded(TENANT, "th-1", "run-1"))
    assert report.event_type is None and receiver.received == []
    assert await audit.list_for_thread(TENANT, "th-1", limit=10) == []


async def test_a_tenant_admin_registers_webhooks_for_every_run_and_gets_the_secret_once(
    store: Any, redis_stream: Any, asgi_client: Any, receiver: WebhookReceiver
) -> None:
    services = Services(
        make_settings(webhook_allow_loopback=True),
        overrides=ServiceOverrides(store=store, stream=redis_stream, model=ScriptedModel()),
    )
    admin = bearer(user="admin-1", scopes=("agent:admin",))
    async with asgi_client(services) as client:
        # GIVEN a user without the admin scope is refused
        assert (await client.get("/api/v1/admin/webhooks", headers=bearer())).status_code == 403
        # WHEN the tenant's admin registers a target and asks for a signing secret
        put = await client.put("/api/v1/admin/webhooks", json={"urls": [receiver.url("/tenant")]}, headers=admin)
        secret = (await client.post("/api/v1/admin/webhooks/secret", headers=admin)).json()["secret"]
        listed = (await client.get("/api/v1/admin/webhooks", headers=admin)).json()
    assert put.status_code == 200 and listed == {"urls": [receiver.url("/tenant")]}
    assert "secret" not in listed
    # AND a run of any user of the tenant (no webhook of its own) ends
    await store.runs.create_run(ended_run(receiver.url()).model_copy(update={"webhook": None, "user_id": "u-9"}))
    await services.webhook_delivery.deliver(RunEnded(TENANT, "th-1", "run-1"))
    # THEN the tenant's target got it, signed with the secret the admin was given
    [received] = receiver.received
    assert received.path == "/tenant"
    assert Webhook(secret).verify(received.body, received.headers)["type"] == "run.succeeded"
    # AND the registration is on the table, another tenant has none, and it can be removed
    assert await services.webhook_registry.targets("tenant-2") == []
    async with asgi_client(services) as client:
        assert (await client.delete("/api/v1/admin/webhooks", headers=admin)).status_code == 204
        assert (await client.get("/api/v1/admin/webhooks", headers=admin)).json() == {"urls": []}


async def test_a_run_and_its_tenant_naming_the_same_target_send_it_once(receiver: WebhookReceiver) -> None:
    from shared.adapters.in_memory.webhook_registry import InMemoryWebhookRegistry

    ledger, registry = InMemoryRunLedger(), InMemoryWebhookRegistry()
    await ledger.create_run(ended_run(receiver.url()))
    await registry.put_targets(TENANT, [receiver.url(), receiver.url("/other")])
    delivery = WebhookDelivery(
        ledger,
        InMemoryAuditLog(),
        InMemoryWebhookSecrets(),
        HttpWebhookPoster(),
        allow_loopback=True,
        registry=registry,
    )
    report = await delivery.deliver(RunEnded(TENANT, "th-1", "run-1"))
    assert sorted(r.path for r in receiver.received) == ["/hook", "/other"]
    assert len(report.delivered) == 2


@pytest.mark.parametrize(
    "urls",
    [
        ["http://hooks.example.com/x"],
        ["https://169.254.169.254/latest"],
        ["https://10.0.0.1/x"],
    ],
)
async def test_an_unsafe_registration_is_refused_and_nothing_stored(
    make_services: Any, asgi_client: Any, urls: list[str]
) -> None:
    services = make_services(ScriptedModel())
    admin = bearer(user="admin-1", scopes=("agent:admin",))
    async with asgi_client(services) as client:
        resp = await client.put("/api/v1/admin/webhooks", json={"urls": ["https://8.8.8.8/ok", *urls]}, headers=admin)
    assert resp.status_code == 422
    error = resp.json()["error"]
    assert error["code"] == "unsafe_url" and error["details"][0]["loc"] == ["body", "urls", 1]
    assert await services.webhook_registry.targets(TENANT) == []
