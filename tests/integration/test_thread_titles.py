"""The title job in the memory function: the real handler on SQS records of ``agent.run.completed`` events, the
thread and the usage counters on moto's DynamoDB, the thread stream on a real redis-server, a scripted model. The
title is generated once, after the first exchange, in the user's language; never over a title the client set
through the API; never for a run that did not finish with an answer; the fallback when the model fails; its tokens
counted as usage of the kind ``title``; the ``thread_title`` event read by a follower of the thread."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import boto3
import httpx
import pytest

from functions.agent_api.app import create_app
from functions.memory_extract.handler import MemoryExtractHandler
from shared.adapters.aws.dynamodb_store import DynamoDBStore
from shared.errors import ModelError
from shared.models import Identity, Message, Role, utc_now
from shared.ports import StreamEntry
from shared.wiring import ServiceOverrides, Services
from tests.support.memory_extract_events import (
    IDEMPOTENCY_TABLE,
    TENANT,
    FakeLambdaContext,
    run_completed,
    sqs_record,
)
from tests.support.scripted_model import ScriptedModel, Turn
from tests.support.settings import REGION, make_settings
from tests.support.tokens import bearer

QUESTION = "Welche Zimmerpflanzen vertragen wenig Licht und trockene Heizungsluft im Winter?"
ANSWER = "Gut geeignet sind Zamioculcas, Bogenhanf und Efeutute: sie brauchen wenig Licht und wenig Wasser."
LIMITS = '{"user": {"tokensPerDay": 1000000}}'


def handler_for(store: DynamoDBStore, redis_url: str, model: ScriptedModel) -> MemoryExtractHandler:
    queue_url = boto3.client("sqs", region_name=REGION).create_queue(QueueName="agent-memory")["QueueUrl"]
    settings = make_settings(
        redis_url=redis_url,
        idempotency_table_name=IDEMPOTENCY_TABLE,
        memory_queue_url=queue_url,
        memory_idle_s=60,  # the extraction waits on the queue: only the title job asks the model here
        limits=LIMITS,
    )
    return MemoryExtractHandler(Services(settings, overrides=ServiceOverrides(store=store, model=model)))


@pytest.fixture
def idempotency(aws: Any) -> None:
    aws.create_table(
        TableName=IDEMPOTENCY_TABLE,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
    )


@pytest.fixture
def model() -> ScriptedModel:
    return ScriptedModel()


@pytest.fixture
def handler(idempotency: None, store: DynamoDBStore, redis_url: str, model: ScriptedModel) -> Iterator[Any]:
    built = handler_for(store, redis_url, model)
    yield built
    built.close()


def first_exchange(store: DynamoDBStore, user: str, thread: str, *, answered: bool = True) -> None:
    """The thread as a chat run leaves it: the question, and (``answered``) the answer it stored."""
    identity = Identity(tenant_id=TENANT, user_id=user)
    messages = [Message(id=f"{thread}-u1", thread_id=thread, role=Role.USER, content=QUESTION, run_id="run-1")]
    if answered:
        messages.append(
            Message(id=f"{thread}-a1", thread_id=thread, role=Role.ASSISTANT, content=ANSWER, run_id="run-1")
        )

    async def write() -> None:
        await store.threads.open_thread(identity, thread)
        await store.threads.append_messages(identity, thread, messages)

    asyncio.run(write())


def deliver(handler: MemoryExtractHandler, *bodies: str) -> None:
    response = handler.handle({"Records": [sqs_record(b) for b in bodies]}, FakeLambdaContext())  # type: ignore[arg-type]
    assert response["batchItemFailures"] == []


def thread_of(store: DynamoDBStore, user: str, thread: str) -> Any:
    return asyncio.run(store.threads.get_thread(Identity(tenant_id=TENANT, user_id=user), thread))


def followed(store: DynamoDBStore, redis_url: str, user: str, thread: str) -> list[dict[str, Any]]:
    """What a follower of the thread (``GET /threads/{id}/events``, from the stream's start) reads of it."""

    async def follow() -> list[dict[str, Any]]:
        services = Services(make_settings(redis_url=redis_url), overrides=ServiceOverrides(store=store))
        entries = await services.threads.events(
            Identity(tenant_id=TENANT, user_id=user), thread, after="0-0", deadline=None
        )
        seen: list[StreamEntry] = []
        async for entry in entries:
            if entry is None:  # a silent stretch: everything on the stream was read
                break
            seen.append(entry)
        await services.stream.close()  # type: ignore[attr-defined]
        return [e.event for e in seen]

    return asyncio.run(follow())


def test_the_first_exchange_is_titled_once_in_the_users_language_and_its_followers_see_it(
    handler: MemoryExtractHandler, model: ScriptedModel, store: DynamoDBStore, redis_url: str
) -> None:
    # GIVEN a thread whose first exchange, in German, has finished, and a model that names it in German
    first_exchange(store, "u-de", "th-de")
    model.turns.append(Turn(text=["Pflanzen für dunkle Räume"], input_tokens=150, output_tokens=7))
    # WHEN the memory function receives the run's event, then the next turn's
    deliver(handler, run_completed("u-de", "th-de", "run-1"))
    deliver(handler, run_completed("u-de", "th-de", "run-2"))
    # THEN the thread has the German title, marked generated, after one model call (the second event asked nothing)
    thread = thread_of(store, "u-de", "th-de")
    assert (thread.title, thread.title_source) == ("Pflanzen für dunkle Räume", "generated")
    [request] = model.requests
    assert "in the language of the user's message" in (request.messages[0].content or "")
    assert QUESTION in (request.messages[1].content or "")
    # AND a follower of the thread reads the thread_title event once
    titles = [e for e in followed(store, redis_url, "u-de", "th-de") if e["type"] == "CUSTOM"]
    assert titles == [
        {"type": "CUSTOM", "name": "thread_title", "value": {"threadId": "th-de", "title": "Pflanzen für dunkle Räume"}}
    ]
    # AND the API shows it as a generated title
    shown = api(store, redis_url, "u-de", "GET", "/api/v1/threads/th-de")
    assert (shown["title"], shown["titleSource"]) == ("Pflanzen für dunkle Räume", "generated")
    # AND the call is the user's usage of the kind "title", on the usage counters in the table
    counters = Services(make_settings(limits=LIMITS), overrides=ServiceOverrides(store=store)).usage_counters
    usage = asyncio.run(counters.usage(TENANT, "u-de", utc_now().strftime("%Y-%m")))
    assert usage.runs == {"title": 1}
    assert (usage.tokens["qwen3.5-flash"].input, usage.tokens["qwen3.5-flash"].output) == (150, 7)


def api(store: DynamoDBStore, redis_url: str, user: str, method: str, path: str, **body: Any) -> dict[str, Any]:
    """One call of the API (in-process, on the same table) as ``user``; its JSON answer."""

    async def call() -> dict[str, Any]:
        services = Services(make_settings(redis_url=redis_url), overrides=ServiceOverrides(store=store))
        app = create_app(services)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://app") as client:
            response = await client.request(method, path, json=body or None, headers=bearer(user=user, tenant=TENANT))
        await services.stream.close()  # type: ignore[attr-defined]
        assert response.status_code == 200, response.text
        answer: dict[str, Any] = response.json()
        return answer

    return asyncio.run(call())


def test_a_title_the_client_set_through_the_api_is_kept_and_the_model_is_not_asked(
    handler: MemoryExtractHandler, model: ScriptedModel, store: DynamoDBStore, redis_url: str
) -> None:
    # GIVEN a finished first exchange that the client renamed before the title job ran
    first_exchange(store, "u-1", "th-named")
    api(store, redis_url, "u-1", "PATCH", "/api/v1/threads/th-named", title="Meine Pflanzen")
    # WHEN the run's event arrives
    deliver(handler, run_completed("u-1", "th-named", "run-1"))
    # THEN the client's title stays, nothing was asked of the model, nothing was published
    thread = thread_of(store, "u-1", "th-named")
    assert (thread.title, thread.title_source) == ("Meine Pflanzen", "client")
    assert model.requests == []
    assert [e for e in followed(store, redis_url, "u-1", "th-named") if e["type"] == "CUSTOM"] == []


def test_no_title_before_the_answer_has_finished(
    handler: MemoryExtractHandler, model: ScriptedModel, store: DynamoDBStore
) -> None:
    # GIVEN a thread whose run failed (its event says so), and one whose answer is not stored
    first_exchange(store, "u-1", "th-failed")
    first_exchange(store, "u-1", "th-unanswered", answered=False)
    # WHEN their events arrive
    deliver(
        handler,
        run_completed("u-1", "th-failed", "run-1", status="failed"),
        run_completed("u-1", "th-unanswered", "run-1"),
    )
    # THEN neither thread has a title, and the model was not asked
    assert thread_of(store, "u-1", "th-failed").title is None
    assert thread_of(store, "u-1", "th-unanswered").title is None
    assert model.requests == []


def test_when_the_model_fails_the_title_is_the_first_message_cut_at_a_word_boundary(
    handler: MemoryExtractHandler, model: ScriptedModel, store: DynamoDBStore
) -> None:
    first_exchange(store, "u-1", "th-down")
    model.turns.append(Turn(raise_error=ModelError("the model endpoint is down", code="model_unavailable")))
    deliver(handler, run_completed("u-1", "th-down", "run-1"))
    thread = thread_of(store, "u-1", "th-down")
    assert thread.title == "Welche Zimmerpflanzen vertragen wenig Licht und trockene…"
    assert thread.title_source == "generated"
