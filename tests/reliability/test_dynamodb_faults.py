"""DynamoDB throttles, and concurrent writers collide on conditional writes.

Throttling is injected below botocore's retry layer (``tests.reliability.throttling``): short bursts are absorbed by
the SDK's retries; when the retries run out, admission answers ``503 service_unavailable`` with nothing admitted,
and a run in progress ends with one ``RUN_ERROR`` ``run_failed``. The user's message is never lost: it is either
stored, or refused with an error the client can retry with the same request.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from shared.adapters.aws.dynamodb_store import DynamoDBStore
from shared.errors import NotFound
from shared.models import RunStatus
from shared.wiring import ServiceOverrides, Services
from tests.reliability.throttling import Throttle, throttled_client
from tests.support.moto_lock import OneRequestAtATime
from tests.support.scripted_model import ScriptedModel, Turn
from tests.support.settings import TABLE, make_settings
from tests.support.streams import assert_no_duplicates, assert_well_formed_run, body, events_of, history
from tests.support.tokens import bearer


@pytest.fixture
def throttle() -> Throttle:
    return Throttle()


@pytest.fixture
def throttled_store(aws: Any, throttle: Throttle) -> DynamoDBStore:
    client = OneRequestAtATime(throttled_client(throttle))
    return DynamoDBStore(TABLE, lambda: client)


@pytest.fixture
def services(throttled_store: DynamoDBStore, redis_stream: Any) -> Services:
    model = ScriptedModel(fallback=lambda _req: Turn(text=["Stored ", "answer."]))
    return Services(
        make_settings(), overrides=ServiceOverrides(store=throttled_store, stream=redis_stream, model=model)
    )


async def post(client: httpx.AsyncClient, payload: dict[str, Any]) -> httpx.Response:
    return await client.post("/api/v1/agent", json=payload, headers=bearer())


async def test_a_burst_of_throttling_is_absorbed_by_sdk_retries(
    services: Services, asgi_client: Any, throttle: Throttle
) -> None:
    # GIVEN DynamoDB throttles the next two transactional writes and two reads
    throttle.on("TransactWriteItems", "GetItem", times=2)
    async with asgi_client(services) as client:
        # WHEN a user sends a message
        resp = await post(client, body("th-burst", "run-burst"))
        items = await history(client, "th-burst")
    # THEN the run succeeds and every message is stored once
    assert throttle.throttled == 2
    assert assert_well_formed_run(events_of(resp.text))["type"] == "RUN_FINISHED"
    assert [(i["role"], i["content"]) for i in items] == [("user", "hello"), ("assistant", "Stored answer.")]


async def test_throttling_at_admission_is_a_503_that_admits_nothing_and_a_retry_works(
    services: Services, asgi_client: Any, throttle: Throttle
) -> None:
    # GIVEN DynamoDB throttles every transactional write, beyond the SDK's retries
    throttle.on("TransactWriteItems")
    payload = body("th-adm", "run-adm", "keep me")
    async with asgi_client(services) as client:
        # WHEN a user sends a message
        refused = await post(client, payload)
        # THEN 503 service_unavailable in the documented shape; no run exists and the thread is not left busy: the
        # new thread the claim created is gone again (nothing of the refused request is stored)
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"]["code"] == "service_unavailable"
        assert await services.store.runs.get_run("tenant-1", "run-adm") is None
        with pytest.raises(NotFound):
            await services.store.threads.get_thread(services.verifier.verify(bearer()["Authorization"]), "th-adm")
        # WHEN DynamoDB recovers and the client repeats the same request
        throttle.off()
        retried = await post(client, payload)
        items = await history(client, "th-adm")
    # THEN the run happens and the message is stored once
    assert assert_well_formed_run(events_of(retried.text))["type"] == "RUN_FINISHED"
    assert [(i["role"], i["content"]) for i in items] == [("user", "keep me"), ("assistant", "Stored answer.")]


async def test_throttling_that_outlasts_retries_mid_run_ends_it_with_run_error_and_keeps_the_message(
    services: Services, asgi_client: Any, throttle: Throttle
) -> None:
    # GIVEN DynamoDB throttles every transactional write after the one that stores the user's message
    throttle.on("TransactWriteItems", skip=1)
    async with asgi_client(services) as client:
        # WHEN a user sends a message and the model answers
        resp = await post(client, body("th-mid", "run-mid", "keep me too"))
        throttle.off()
        items = await history(client, "th-mid")
        run = await services.store.runs.get_run("tenant-1", "run-mid")
        # THEN the stream ends with exactly one RUN_ERROR run_failed, the run is recorded failed, and the user's
        # message is kept (the answer that could not be stored is not in history, and nothing is doubled)
        terminal = assert_well_formed_run(events_of(resp.text))
        assert (terminal["type"], terminal["code"]) == ("RUN_ERROR", "run_failed")
        assert run is not None and (run.status, run.error_code) == (RunStatus.FAILED, "run_failed")
        assert [(i["role"], i["content"]) for i in items] == [("user", "keep me too")]
        # AND the thread is free and takes the next run
        nxt = await post(client, body("th-mid", "run-mid-2", "again", "u-2"))
        after = await history(client, "th-mid")
    assert assert_well_formed_run(events_of(nxt.text))["type"] == "RUN_FINISHED"
    assert [i["role"] for i in after] == ["user", "user", "assistant"]
    assert_no_duplicates(after)


async def test_concurrent_retries_of_one_run_attach_to_a_single_run(make_services: Any, asgi_client: Any) -> None:
    # GIVEN a model that answers slowly
    model = ScriptedModel(fallback=lambda _req: Turn(text=["a ", "b ", "c"], delay_s=0.05))
    services = make_services(model)
    payload = body("th-same", "run-same")
    async with asgi_client(services) as client:
        # WHEN the same request arrives five times at once (a client retrying through a flaky network)
        responses = await asyncio.gather(*(post(client, payload) for _ in range(5)))
        items = await history(client, "th-same")
    # THEN every response is the same single run, the model answered it once, and each message is stored once
    streams = [events_of(r.text) for r in responses]
    assert all(r.status_code == 200 for r in responses)
    assert all(s == streams[0] for s in streams)
    assert assert_well_formed_run(streams[0])["type"] == "RUN_FINISHED"
    # (the copy that claimed the thread sends the first model request ahead of its write; when another copy's write
    # stores the run first, that request is closed unread and the run sends its own: at most one more request)
    assert len(model.requests) in (1, 2)
    assert [(i["role"], i["content"]) for i in items] == [("user", "hello"), ("assistant", "a b c")]


async def test_concurrent_new_runs_on_one_thread_admit_exactly_one(make_services: Any, asgi_client: Any) -> None:
    # GIVEN five different runs sent at once to the same thread
    model = ScriptedModel(fallback=lambda _req: Turn(text=["only ", "one"], delay_s=0.05))
    services = make_services(model)
    payloads = [body("th-race", f"run-race-{n}", f"message {n}", f"u-{n}") for n in range(5)]
    async with asgi_client(services) as client:
        responses = await asyncio.gather(*(post(client, p) for p in payloads))
        items = await history(client, "th-race")
    # THEN the thread's claim (a conditional write) admits exactly one; the others get 409 thread_busy
    codes = sorted(r.status_code for r in responses)
    assert codes == [200, 409, 409, 409, 409]
    assert {r.json()["error"]["code"] for r in responses if r.status_code == 409} == {"thread_busy"}
    # AND exactly the admitted run's message is stored (the refused ones were never admitted: their clients retry)
    winner = next(i for i, r in enumerate(responses) if r.status_code == 200)
    assert [(i["role"], i["content"]) for i in items] == [("user", f"message {winner}"), ("assistant", "only one")]
    assert len(model.requests) == 1
