"""A stack serves only its tenants (``SERVED_TENANTS``, shared/tenancy.py), from the attacker's side: a valid token
of a tenant the stack does not serve is refused with ``404 tenant_not_served`` on every route before the table or
Redis is touched; that tenant's memory events and automation fires are dropped and counted
(``UnservedTenantEventsDropped``). moto, a real redis-server, the API in-process, the two handlers as Lambda calls
them."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from redis import Redis

from bench.dynamo_meter import DynamoMeter, describe
from functions.agent_api.app import create_app
from functions.automation import handler as automation
from functions.memory_extract.handler import MemoryExtractHandler
from shared.adapters.aws.automation_store import DynamoDBAutomationStore
from shared.adapters.aws.dynamodb_store import DynamoDBStore
from shared.auth import mint_local_token
from shared.tenancy import UNSERVED_TENANT_EVENTS_DROPPED
from shared.wiring import ServiceOverrides, Services
from tests.support.automation_events import SCHEDULER_SETTINGS, LambdaContext, as_delivered, stored_input
from tests.support.memory_extract_events import (
    IDEMPOTENCY_TABLE,
    FakeLambdaContext,
    RaisingScriptedModel,
    due_records,
    run_completed,
    seed,
    sqs_record,
)
from tests.support.metered_table import metered_store
from tests.support.moto_lock import OneRequestAtATime
from tests.support.scripted_model import ScriptedModel, Turn
from tests.support.settings import REGION, TABLE, make_settings
from tests.support.tokens import bearer

SERVED = "tenant-1"
OTHER = "tenant-2"


def metered_client(aws: Any) -> tuple[Any, DynamoMeter]:
    """A DynamoDB client on the ``aws`` fixture's moto whose every request is metered."""
    session = boto3.session.Session(region_name=REGION)
    meter = DynamoMeter(aws, [describe(aws, TABLE)])
    meter.install(session.events)
    return OneRequestAtATime(session.client("dynamodb")), meter


def table_items() -> list[dict[str, Any]]:
    return list(boto3.client("dynamodb", region_name=REGION).scan(TableName=TABLE)["Items"])


def redis_keys(redis_url: str) -> set[bytes]:
    client = Redis.from_url(redis_url)
    try:
        return set(client.keys("*"))
    finally:
        client.close()


def dropped_counts(out: str) -> list[tuple[str, Any]]:
    """(source, count) of each ``UnservedTenantEventsDropped`` EMF document printed."""
    docs = [json.loads(line) for line in out.splitlines() if line.startswith('{"_aws"')]
    return [
        (doc["source"], doc[UNSERVED_TENANT_EVENTS_DROPPED]) for doc in docs if UNSERVED_TENANT_EVENTS_DROPPED in doc
    ]


def every_api_route(services: Services) -> list[tuple[str, str]]:
    """(method, path) of every route of the API, from its OpenAPI document, the path's parameters filled in."""
    schema = create_app(services).openapi()
    return [
        (method.upper(), re.sub(r"\{[^}]+\}", "x-1", path))
        for path, operations in schema["paths"].items()
        if path.startswith("/api/")
        for method in operations
    ]


async def test_a_token_of_a_tenant_not_served_is_404_on_every_route_and_touches_nothing(
    aws: Any, redis_stream: Any, redis_url: str, asgi_client: Any
) -> None:
    # GIVEN a stack serving tenant-1 only, with a run of tenant-1 already stored (so there is something to reach)
    store, meter = metered_store(aws)
    model = ScriptedModel(Turn(text=["hello"]))
    services = Services(
        make_settings(served_tenants=(SERVED,)),
        overrides=ServiceOverrides(store=store, stream=redis_stream, model=model),
    )
    routes = every_api_route(services)
    assert len(routes) > 25 and ("POST", "/api/v1/agent") in routes
    async with asgi_client(services) as client:
        body = {"threadId": "x-1", "runId": "x-1", "messages": [{"id": "m1", "role": "user", "content": "hi"}]}
        served = await client.post("/api/v1/agent", json=body, headers=bearer(tenant=SERVED))
        assert served.status_code == 200 and "RUN_FINISHED" in served.text
        items, keys, requests = table_items(), redis_keys(redis_url), meter.snapshot().requests.total()
        assert items and keys
        # WHEN a valid token of tenant-2 calls every route, with the ids tenant-1's run used
        forged = mint_local_token("not-the-secret-of-this-stack-at-all-0123", user_id="user-1", tenant_id=OTHER)
        unsigned = await client.get("/api/v1/threads", headers={"Authorization": f"Bearer {forged}"})
        answers = {
            (method, path): await client.request(
                method, path, json=body if method in ("POST", "PUT", "PATCH") else None, headers=bearer(tenant=OTHER)
            )
            for method, path in routes
        }
    # THEN a token that fails its check is 401 as anywhere (which tenants a stack serves is told only to a valid
    # token), and each route answers a valid one 404 tenant_not_served
    assert (unsigned.status_code, unsigned.json()["error"]["code"]) == (401, "invalid_token")
    refused = {route: (r.status_code, r.json()["error"]["code"]) for route, r in answers.items()}
    assert refused == dict.fromkeys(answers, (404, "tenant_not_served"))
    # AND nothing was read or written: not one table request, no item and no Redis key more, no model call
    assert meter.snapshot().requests.total() == requests
    assert table_items() == items
    assert redis_keys(redis_url) == keys
    assert len(model.requests) == 1


@pytest.fixture
def memory_handler(aws: Any, store: DynamoDBStore, redis_url: str) -> Iterator[MemoryExtractHandler]:
    """The memory function of a stack that does not serve the events' tenant (``TENANT``)."""
    queue_url = boto3.client("sqs", region_name=REGION).create_queue(QueueName="agent-memory")["QueueUrl"]
    aws.create_table(
        TableName=IDEMPOTENCY_TABLE,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
    )
    settings = make_settings(
        redis_url=redis_url,
        idempotency_table_name=IDEMPOTENCY_TABLE,
        memory_queue_url=queue_url,
        memory_idle_s=0,
        served_tenants=(SERVED,),
    )
    built = MemoryExtractHandler(
        Services(settings, overrides=ServiceOverrides(store=store, model=RaisingScriptedModel()))
    )
    yield built
    built.close()


def test_memory_events_of_a_tenant_not_served_are_dropped_and_counted(
    memory_handler: MemoryExtractHandler, store: DynamoDBStore, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a thread of TENANT worth remembering, on a stack that serves tenant-1 only
    asyncio.run(seed(store, "u-1", "th-a", "I am a nurse and I work night shifts."))
    items = table_items()
    capsys.readouterr()
    # WHEN its run-completed event arrives twice (a redelivery)
    event = run_completed("u-1", "th-a", "run-a")
    response = memory_handler.handle({"Records": [sqs_record(event), sqs_record(event)]}, FakeLambdaContext())  # type: ignore[arg-type]
    # THEN neither record fails (a retry would be dropped the same way), each is counted as dropped
    assert response["batchItemFailures"] == []
    assert dropped_counts(capsys.readouterr().out) == [("memory", [1.0]), ("memory", [1.0])]
    # AND nothing was written: no item (no idempotency record either), no due message, no memory run
    assert table_items() == items
    assert boto3.client("dynamodb", region_name=REGION).scan(TableName=IDEMPOTENCY_TABLE)["Items"] == []
    assert due_records() == []


@pytest.fixture
def scheduler(aws: Any) -> Any:
    client = boto3.client("scheduler", region_name=REGION)
    client.create_schedule_group(Name=SCHEDULER_SETTINGS["scheduler_group_name"])
    return client


async def test_automation_fires_of_a_tenant_not_served_are_dropped_and_counted(
    aws: Any,
    store: DynamoDBStore,
    redis_stream: Any,
    scheduler: Any,
    asgi_client: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # GIVEN a task of tenant-1, created on a stack that served it
    model = ScriptedModel(fallback=lambda _req: Turn(text=["briefing"]))
    overrides = ServiceOverrides(store=store, stream=redis_stream, model=model)
    creating = Services(make_settings(**SCHEDULER_SETTINGS), overrides=overrides)
    async with asgi_client(creating) as client:
        task_body = {"name": "Brief", "scheduleExpression": "cron(0 8 ? * MON-FRI *)", "prompt": "Summarise."}
        created = await client.post("/api/v1/automations", json=task_body, headers=bearer(tenant=SERVED))
    assert created.status_code == 201, created.text
    task_id = created.json()["taskId"]
    fire = as_delivered(stored_input(scheduler, task_id), scheduled_time="2025-01-06T00:00:00Z", execution_id="e1")
    # AND the automation function of a stack that serves only tenant-2 (its table requests metered)
    client, meter = metered_client(aws)
    serving_other = Services(
        make_settings(served_tenants=(OTHER,), **SCHEDULER_SETTINGS),
        overrides=ServiceOverrides(
            store=DynamoDBStore(TABLE, lambda: client),
            automation_store=DynamoDBAutomationStore(TABLE, lambda: client),
            stream=redis_stream,
            model=model,
        ),
    )
    items = table_items()
    capsys.readouterr()
    # WHEN the fire arrives with its tenant
    with_tenant = await automation.handle(fire, LambdaContext(aws_request_id="req-1"), serving_other)
    # THEN it is dropped before the task is even read
    assert (with_tenant["status"], with_tenant["runId"]) == ("tenant_not_served", None)
    assert meter.snapshot().requests.total() == 0
    # WHEN it arrives without its tenant (the task is found by its id)
    by_id = await automation.handle({"taskId": task_id}, LambdaContext(aws_request_id="req-2"), serving_other)
    # THEN it is dropped once the task read names the tenant
    assert by_id["status"] == "tenant_not_served"
    # AND both are counted, no run is made, nothing is written
    assert dropped_counts(capsys.readouterr().out) == [("automation", [1.0]), ("automation", [1.0])]
    assert model.requests == []
    assert table_items() == items
