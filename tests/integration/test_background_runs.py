"""Background runs (``forwardedProps.background: true``, shared/runs/background.py) through the ASGI app, on moto and
a real redis-server, started as ``make dev`` starts them (a drain in the same process) and as the background-run
function does (its handler, with the invocation it is asked for recorded): ``202`` at once, the status through its
values, another user's run ``404``, a cancel while queued and while running, the admission rules (double texting,
an idempotent ``runId``, limits) unchanged."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any

import httpx
from standardwebhooks import Webhook

from functions.background_run.handler import handle as drain_handler
from shared.adapters.aws.queue_starter import LambdaQueueStarter
from shared.adapters.in_memory.invoker import RecordingInvoker
from shared.adapters.in_memory.publisher import InMemoryEventPublisher
from shared.memory.trigger import RunCompletedPublisher
from shared.webhooks.delivery import RunEnded
from shared.wiring import ServiceOverrides, Services
from tests.support.scripted_model import ScriptedModel, Turn
from tests.support.settings import make_settings
from tests.support.sse import parse_sse
from tests.support.tokens import bearer
from tests.support.webhook_receiver import webhook_receiver

LIMITS = json.dumps({"user": {"concurrentRuns": 1}})


def body(run: str, thread: str = "th-bg", text: str = "hi", **props: Any) -> dict[str, Any]:
    message = {"id": f"u-{run}", "role": "user", "content": text}
    forwarded = {"background": True, **props}
    return {
        "threadId": thread,
        "runId": run,
        "messages": [message],
        "tools": [],
        "context": [],
        "forwardedProps": forwarded,
    }


async def status(client: httpx.AsyncClient, run: str, **who: Any) -> httpx.Response:
    return await client.get(f"/api/v1/agent/runs/{run}", headers=bearer(**who))


async def until(client: httpx.AsyncClient, run: str, wanted: str) -> dict[str, Any]:
    for _ in range(600):
        resp = await status(client, run)
        if resp.status_code == 200 and resp.json()["status"] == wanted:
            return dict(resp.json())
        await asyncio.sleep(0.01)
    raise AssertionError(f"{run} never showed {wanted}: {resp.status_code} {resp.text}")


def drained(services: Services) -> Any:
    starter = services.queue_starter
    assert starter is not None
    return starter.wait_idle()  # type: ignore[attr-defined]


async def test_a_background_run_answers_202_at_once_then_runs_and_shows_each_status(
    make_services: Any, asgi_client: Any
) -> None:
    # GIVEN a model that takes a moment
    services = make_services(ScriptedModel(Turn(text=["Done", " here"], delay_s=0.5, input_tokens=7)))
    async with asgi_client(services) as client:
        # WHEN a background run is posted
        resp = await client.post("/api/v1/agent", json=body("bg-1"), headers=bearer())
        at_once = (await status(client, "bg-1")).json()["status"]
        running = await until(client, "bg-1", "running")
        ended = await until(client, "bg-1", "succeeded")
        events = await client.get("/api/v1/agent/runs/bg-1/events", headers=bearer())
        await drained(services)
    # THEN 202 before the model answered, with where to look
    assert resp.status_code == 202
    assert resp.json() == {
        "runId": "bg-1",
        "threadId": "th-bg",
        "status": "queued",
        "statusUrl": "/api/v1/agent/runs/bg-1",
        "eventsUrl": "/api/v1/agent/runs/bg-1/events",
    }
    assert resp.headers["location"] == "/api/v1/agent/runs/bg-1"
    assert at_once in ("queued", "running")
    # AND the status went queued -> running -> succeeded, with its usage and its two messages
    assert "heartbeatAt" in running
    assert ended["outcome"] == {"type": "success"} and ended["usage"][0]["inputTokens"] == 7
    frames = [f.json() for f in parse_sse(events.text) if not f.is_comment_only]
    assert frames[0]["type"] == "RUN_STARTED" and frames[-1]["type"] == "RUN_FINISHED"
    text = "".join(f["delta"] for f in frames if f["type"] == "TEXT_MESSAGE_CONTENT")
    assert text == "Done here"
    assert ended["messageIds"][0] == "u-bg-1" and len(ended["messageIds"]) == 2


async def test_another_users_background_run_is_404_to_read_follow_and_cancel(
    make_services: Any, asgi_client: Any
) -> None:
    services = make_services(ScriptedModel(Turn(text=["slow"], delay_s=1.0)))
    async with asgi_client(services) as client:
        assert (await client.post("/api/v1/agent", json=body("bg-2"), headers=bearer())).status_code == 202
        # WHEN another user, and a user of another tenant, read, follow and cancel it
        for who in ({"user": "mallory"}, {"tenant": "other-tenant"}):
            assert (await status(client, "bg-2", **who)).status_code == 404
            events = await client.get("/api/v1/agent/runs/bg-2/events", headers=bearer(**who))
            assert events.status_code == 404
            cancel = await client.post("/api/v1/agent/runs/bg-2/cancel", headers=bearer(**who))
            assert cancel.status_code == 404
        # AND another user of the tenant reuses its runId (another tenant's ids are its own: nothing to collide)
        taken = await client.post("/api/v1/agent", json=body("bg-2"), headers=bearer(user="mallory"))
        assert taken.status_code == 404, taken.text
        # THEN the owner's run was untouched
        assert (await until(client, "bg-2", "succeeded"))["outcome"] == {"type": "success"}
        await drained(services)


async def test_a_background_run_cancelled_while_it_runs_ends_cancelled(make_services: Any, asgi_client: Any) -> None:
    services = make_services(ScriptedModel(Turn(text=["never"], delay_s=5.0)))
    async with asgi_client(services) as client:
        assert (await client.post("/api/v1/agent", json=body("bg-3"), headers=bearer())).status_code == 202
        await until(client, "bg-3", "running")
        # WHEN its owner cancels it
        resp = await client.post("/api/v1/agent/runs/bg-3/cancel", headers=bearer())
        doc = await until(client, "bg-3", "cancelled")
        await drained(services)
    assert resp.status_code == 200
    assert doc["outcome"] == {"type": "cancelled"}


async def test_a_queued_background_run_is_cancelled_before_it_starts_and_never_runs(
    make_services: Any, asgi_client: Any
) -> None:
    # GIVEN a thread busy with a slow background run, and a second one queued behind it
    model = ScriptedModel(Turn(text=["first"], delay_s=1.0))
    services = make_services(model)
    async with asgi_client(services) as client:
        first = await client.post("/api/v1/agent", json=body("bg-4a", multitaskStrategy="enqueue"), headers=bearer())
        await until(client, "bg-4a", "running")
        second = await client.post(
            "/api/v1/agent", json=body("bg-4b", text="then", multitaskStrategy="enqueue"), headers=bearer()
        )
        queued = (await status(client, "bg-4b")).json()
        # WHEN the queued one is cancelled
        cancel = await client.post("/api/v1/agent/runs/bg-4b/cancel", headers=bearer())
        await until(client, "bg-4a", "succeeded")
        await drained(services)
        doc = (await status(client, "bg-4b")).json()
        history = (await client.get("/api/v1/threads/th-bg/history", headers=bearer())).json()
    # THEN it was queued, is recorded cancelled, and its message never reached the thread or the model
    assert (first.status_code, second.status_code, queued["status"]) == (202, 202, "queued")
    assert cancel.json() == {"runId": "bg-4b", "status": "cancelled"}
    assert doc["status"] == "cancelled"
    assert all(m["id"] != "u-bg-4b" for m in history["items"]) and history["items"]
    assert len(model.requests) == 1


async def test_double_texting_and_a_retried_run_id_follow_the_admission_rules(
    make_services: Any, asgi_client: Any
) -> None:
    services = make_services(ScriptedModel(Turn(text=["a"], delay_s=1.0)))
    async with asgi_client(services) as client:
        assert (await client.post("/api/v1/agent", json=body("bg-5"), headers=bearer())).status_code == 202
        await until(client, "bg-5", "running")
        # WHEN a second background run is sent with the reject strategy while the first runs
        busy = await client.post("/api/v1/agent", json=body("bg-5b", multitaskStrategy="reject"), headers=bearer())
        # AND the first is sent again, the same body, then another body under its runId
        again = await client.post("/api/v1/agent", json=body("bg-5"), headers=bearer())
        other = await client.post("/api/v1/agent", json=body("bg-5", text="changed"), headers=bearer())
        await until(client, "bg-5", "succeeded")
        await drained(services)
        rejected = await status(client, "bg-5b")
    # THEN 409 thread_busy with nothing stored; the retry answers the same run; another body is 409
    assert (busy.status_code, busy.json()["error"]["code"]) == (409, "thread_busy")
    assert rejected.status_code == 404
    assert again.status_code == 202 and again.json()["runId"] == "bg-5"
    assert again.json()["status"] in ("running", "succeeded")
    assert (other.status_code, other.json()["error"]["code"]) == (409, "run_id_conflict")


async def test_a_background_run_refused_by_a_limit_at_its_turn_is_recorded_failed(
    make_services: Any, asgi_client: Any
) -> None:
    # GIVEN one concurrent run allowed per user, held by a run on another thread
    services = make_services(ScriptedModel(Turn(text=["long"], delay_s=1.0)), limits=LIMITS)
    async with asgi_client(services) as client:
        holder = await client.post("/api/v1/agent", json=body("bg-6a", thread="th-other"), headers=bearer())
        await until(client, "bg-6a", "running")
        # WHEN a background run's turn comes while the limit is reached
        resp = await client.post("/api/v1/agent", json=body("bg-6b"), headers=bearer())
        doc = await until(client, "bg-6b", "failed")
        await drained(services)
    # THEN it was accepted, and then recorded as never started, with the documented code
    assert (holder.status_code, resp.status_code) == (202, 202)
    assert doc["error"]["code"] == "run_not_started"


async def test_the_background_run_function_drains_the_thread_it_is_invoked_for(
    store: Any, redis_stream: Any, asgi_client: Any
) -> None:
    # GIVEN the API with the Lambda starter (its invocations recorded) and a function with the same services
    invoker = RecordingInvoker()
    model = ScriptedModel(Turn(text=["from the function"]))
    services = Services(
        make_settings(),
        overrides=ServiceOverrides(
            store=store, stream=redis_stream, model=model, queue_starter=LambdaQueueStarter(invoker, "bg-fn")
        ),
    )
    async with asgi_client(services) as client:
        resp = await client.post("/api/v1/agent", json=body("bg-7"), headers=bearer())
        queued = (await status(client, "bg-7")).json()["status"]
        # WHEN the function receives the invocation the API asked for
        assert [f for f, _ in invoker.invocations] == ["bg-fn"]
        outcome = await drain_handler(invoker.invocations[0][1], SimpleNamespace(), services)
        doc = (await status(client, "bg-7")).json()
    # THEN the run was queued until then, and ran in the function's invocation
    assert (resp.status_code, queued) == (202, "queued")
    assert outcome == {"threadId": "th-bg", "drained": True, "runs": {"bg-7": "succeeded"}}
    assert doc["status"] == "succeeded" and len(doc["messageIds"]) == 2


async def test_the_background_run_function_drops_a_tenant_this_stack_does_not_serve(
    store: Any, redis_stream: Any
) -> None:
    services = Services(
        make_settings(served_tenants="acme"),
        overrides=ServiceOverrides(store=store, stream=redis_stream, model=ScriptedModel()),
    )
    outcome = await drain_handler({"tenantId": "intruder", "threadId": "th-x"}, SimpleNamespace(), services)
    assert outcome == {"dropped": "tenant_not_served"}


async def test_inside_lambda_without_a_background_function_a_background_run_is_refused(
    store: Any, redis_stream: Any, asgi_client: Any
) -> None:
    services = Services(
        make_settings(lambda_function_name="streaming-api"),
        overrides=ServiceOverrides(store=store, stream=redis_stream, model=ScriptedModel()),
    )
    async with asgi_client(services) as client:
        resp = await client.post("/api/v1/agent", json=body("bg-8"), headers=bearer())
        missing = await status(client, "bg-8")
    assert (resp.status_code, resp.json()["error"]["code"]) == (422, "background_unavailable")
    assert missing.status_code == 404


async def test_a_background_run_cancelled_while_queued_sends_its_signed_run_cancelled_webhook(
    store: Any, redis_stream: Any, asgi_client: Any
) -> None:
    # GIVEN the bus as the run's end publishes to it, and a thread busy with a slow background run
    bus = InMemoryEventPublisher()
    services = Services(
        make_settings(webhook_allow_loopback=True),
        overrides=ServiceOverrides(
            store=store,
            stream=redis_stream,
            model=ScriptedModel(Turn(text=["first"], delay_s=1.0)),
            run_completed_publisher=RunCompletedPublisher(bus),
        ),
    )
    with webhook_receiver(codes=[]) as receiver:
        async with asgi_client(services) as client:
            first = body("bg-9a", multitaskStrategy="enqueue")
            assert (await client.post("/api/v1/agent", json=first, headers=bearer())).status_code == 202
            await until(client, "bg-9a", "running")
            queued = body("bg-9b", multitaskStrategy="enqueue", webhook=receiver.url())
            assert (await client.post("/api/v1/agent", json=queued, headers=bearer())).status_code == 202
            # WHEN it is cancelled before it starts
            assert (await client.post("/api/v1/agent/runs/bg-9b/cancel", headers=bearer())).status_code == 200
            await drained(services)
        # AND the webhook function takes the run-ended event the bus received for it
        (event,) = [e for e in bus.published if e.detail["runId"] == "bg-9b"]
        detail = event.detail
        ended = RunEnded(detail["tenantId"], detail["threadId"], detail["runId"], detail.get("outcome"))
        await services.webhook_delivery.deliver(ended)
        (delivery,) = receiver.received
    # THEN its own target got a signed run.cancelled with the run's status document
    secret = await services.webhook_secrets.secret("tenant-1")
    sent = Webhook(secret).verify(delivery.body, delivery.headers)
    assert sent["type"] == "run.cancelled"
    assert (sent["data"]["runId"], sent["data"]["status"]) == ("bg-9b", "cancelled")


async def test_a_malformed_background_request_is_refused_at_once_with_nothing_queued(
    make_services: Any, asgi_client: Any
) -> None:
    services = make_services(ScriptedModel())
    async with asgi_client(services) as client:
        # WHEN the flag is not a boolean, or the branch request is contradictory (regenerate and an edit at once)
        not_bool = await client.post("/api/v1/agent", json=body("bg-x1", background="yes"), headers=bearer())
        both = body("bg-x2", regenerate=True, parentMessageId=None)
        contradictory = await client.post("/api/v1/agent", json=both, headers=bearer())
        statuses = [(await status(client, run)).status_code for run in ("bg-x1", "bg-x2")]
    # THEN each is a 422 naming what is wrong, and neither run exists, queued or otherwise
    assert (not_bool.status_code, not_bool.json()["error"]["code"]) == (422, "invalid_request")
    assert not_bool.json()["error"]["details"][0]["loc"] == ["body", "forwardedProps", "background"]
    assert contradictory.status_code == 422
    assert statuses == [404, 404]
