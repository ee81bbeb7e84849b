"""Shared state through the HTTP API (ASGI app, moto, real Redis, scripted model): bounded on the way in, returned
by the history API to its owner only, erased with the thread; and the thread's events opening with a
``MESSAGES_SNAPSHOT`` when asked."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx

from shared.runs.deadline import LAMBDA_CONTEXT_HEADER
from shared.thread_state.limits import MAX_STATE_BYTES, MAX_STATE_DEPTH
from shared.wiring import Services
from tests.support.scripted_model import ScriptedModel, Turn
from tests.support.shared_state import bearer_for, run_body
from tests.support.sse import parse_sse

PLAN = {"steps": [{"description": "book hotel", "status": "pending"}]}
DONE_PATCH = [{"op": "replace", "path": "/steps/0/status", "value": "done"}]


def events_of(resp: httpx.Response) -> list[dict[str, Any]]:
    return [f.json() for f in parse_sse(resp.text) if not f.is_comment_only]


async def run_once(client: httpx.AsyncClient, services: Services, body: dict[str, Any]) -> list[dict[str, Any]]:
    resp = await client.post("/api/v1/agent", json=body, headers=bearer_for(services))
    assert resp.status_code == 200, resp.text
    return events_of(resp)


async def test_history_returns_the_state_to_its_owner_and_another_user_gets_404(
    make_services: Any, asgi_client: Any
) -> None:
    model = ScriptedModel(
        Turn(tool_calls=[("c1", "update_state", json.dumps({"patch": DONE_PATCH}))]), Turn(text=["Booked."])
    )
    services = make_services(model)
    async with asgi_client(services) as client:
        events = await run_once(client, services, run_body("th-s", "run-1", "book it", state=PLAN))
        assert [e["type"] for e in events][:3] == ["RUN_STARTED", "STATE_SNAPSHOT", "STEP_STARTED"]
        assert [e["delta"] for e in events if e["type"] == "STATE_DELTA"] == [DONE_PATCH]
        mine = await client.get("/api/v1/threads/th-s/history", headers=bearer_for(services))
        theirs = await client.get("/api/v1/threads/th-s/history", headers=bearer_for(services, user="mallory"))
        other_tenant = await client.get("/api/v1/threads/th-s/history", headers=bearer_for(services, tenant="tenant-2"))
    assert mine.status_code == 200
    body = mine.json()
    assert body["state"] == {"steps": [{"description": "book hotel", "status": "done"}]}
    assert body["stateVersion"] == 2
    assert (theirs.status_code, other_tenant.status_code) == (404, 404)
    assert "state" not in theirs.json() and "book hotel" not in theirs.text


async def test_another_user_cannot_read_or_overwrite_a_threads_state_through_a_run(
    make_services: Any, asgi_client: Any
) -> None:
    services = make_services(ScriptedModel(Turn(text=["ok"])))
    async with asgi_client(services) as client:
        await run_once(client, services, run_body("th-x", "run-1", "hi", state=PLAN))
        # WHEN another user runs on the same thread id, with or without a state of their own
        hijack = await client.post(
            "/api/v1/agent",
            json=run_body("th-x", "run-2", "show me", state={"steps": []}),
            headers=bearer_for(services, user="mallory"),
        )
        mine = await client.get("/api/v1/threads/th-x/history", headers=bearer_for(services))
    # THEN the run is refused as for a thread that does not exist, and the owner's state is untouched
    assert hijack.status_code == 404
    assert "book hotel" not in hijack.text
    assert (mine.json()["state"], mine.json()["stateVersion"]) == (PLAN, 1)


async def test_an_oversized_or_too_deep_or_non_object_state_is_refused_with_422_and_nothing_stored(
    make_services: Any, asgi_client: Any
) -> None:
    services = make_services(ScriptedModel())
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(MAX_STATE_DEPTH):
        node["d"] = {}
        node = node["d"]
    cases = {
        "state_too_large": {"blob": "x" * MAX_STATE_BYTES},
        "state_too_deep": deep,
        "not_an_object": ["a", "list"],
    }
    async with asgi_client(services) as client:
        answers = {
            name: await client.post(
                "/api/v1/agent", json=run_body("th-big", f"run-{name}", "hi", state=state), headers=bearer_for(services)
            )
            for name, state in cases.items()
        }
        history = await client.get("/api/v1/threads/th-big/history", headers=bearer_for(services))
    assert {name: r.status_code for name, r in answers.items()} == dict.fromkeys(cases, 422)
    assert answers["state_too_large"].json()["error"]["code"] == "state_too_large"
    assert f"at most {MAX_STATE_BYTES}" in answers["state_too_large"].json()["error"]["message"]
    assert answers["state_too_deep"].json()["error"]["code"] == "state_too_large"
    assert answers["not_an_object"].json()["error"]["code"] == "invalid_state"
    assert history.status_code == 404  # nothing was stored, not even the thread


async def test_the_next_run_starts_from_the_stored_state_when_the_client_sends_none(
    make_services: Any, asgi_client: Any
) -> None:
    services = make_services(ScriptedModel(Turn(text=["one"]), Turn(text=["two"]), Turn(text=["three"])))
    async with asgi_client(services) as client:
        await run_once(client, services, run_body("th-n", "run-1", "hi", state=PLAN))
        second = await run_once(client, services, run_body("th-n", "run-2", "again"))
        third = await run_once(client, services, run_body("th-n", "run-3", "once more", state={}))
    assert second[1]["type"] == "STATE_SNAPSHOT" and second[1]["snapshot"] == PLAN
    assert third[1]["snapshot"] == PLAN  # {} is "no state", as the official client sends when it holds none


async def test_deleting_the_thread_erases_its_state(make_services: Any, asgi_client: Any) -> None:
    services = make_services(ScriptedModel(Turn(text=["ok"]), Turn(text=["fresh"])))
    async with asgi_client(services) as client:
        await run_once(client, services, run_body("th-d", "run-1", "hi", state=PLAN))
        deleted = await client.delete("/api/v1/threads/th-d", headers=bearer_for(services))
        assert deleted.status_code in (200, 204)
        assert await services.thread_states.read(_identity(), "th-d") is None
        # AND a new thread under the same id starts empty
        again = await run_once(client, services, run_body("th-d", "run-2", "new start"))
    assert again[1]["snapshot"] == {}


async def test_thread_events_open_with_a_messages_snapshot_when_asked_then_follow_only_new_runs(
    make_services: Any, asgi_client: Any
) -> None:
    services = make_services(
        ScriptedModel(Turn(text=["Hello ", "there."]), Turn(text=["Again."])), stream_deadline_margin_s=1.0
    )
    async with asgi_client(services) as client:
        await run_once(client, services, run_body("th-m", "run-1", "hi"))

        async def new_run_soon() -> None:
            await asyncio.sleep(0.5)
            await run_once(client, services, run_body("th-m", "run-2", "more"))

        # WHEN a second device follows the thread with the snapshot flag (an invocation with 3 s left), and a new run
        # starts meanwhile
        deadline_ms = int((time.time() + 3.0) * 1000)
        following, _ = await asyncio.gather(
            client.get(
                "/api/v1/threads/th-m/events",
                params={"snapshot": "messages"},
                headers={**bearer_for(services), LAMBDA_CONTEXT_HEADER: json.dumps({"deadline": deadline_ms})},
            ),
            new_run_soon(),
        )
        refused = await client.get(
            "/api/v1/threads/th-m/events", params={"snapshot": "everything"}, headers=bearer_for(services)
        )
        theirs = await client.get(
            "/api/v1/threads/th-m/events", params={"snapshot": "messages"}, headers=bearer_for(services, user="m")
        )
    frames = events_of(following)
    # THEN the first event is the conversation so far, in AG-UI message form
    first = frames[0]
    assert first["type"] == "MESSAGES_SNAPSHOT"
    assert [(m["role"], m.get("content")) for m in first["messages"]] == [("user", "hi"), ("assistant", "Hello there.")]
    # AND what follows is the new run from its start: the finished run is not replayed (the snapshot holds it)
    after = frames[1:]
    assert after[0]["type"] == "RUN_STARTED" and after[0]["runId"] == "run-2"
    assert after[-1]["type"] == "RUN_FINISHED"
    assert {f.get("metadata", {}).get("runId") for f in after} == {"run-2"}
    assert (refused.status_code, theirs.status_code) == (422, 404)


def _identity() -> Any:
    from shared.models import Identity

    return Identity(tenant_id="tenant-1", user_id="user-1")
