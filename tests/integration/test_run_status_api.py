"""A run's status document (``GET /api/v1/agent/runs/{runId}``) and a thread's runs (``GET /api/v1/threads/{id}/
runs``) through the ASGI app, on moto and a real redis-server: each status a run goes through, the outcome it left
(pending front-end calls, interrupts, an error code), its usage and the ids of the messages it stored; another
user's run, or a run of another tenant, is 404 (docs/protocols/agent/api-endpoints.md §2)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from shared.errors import ModelError
from shared.llm.types import ToolSpec
from shared.tools.clock import make_clock_tool
from shared.tools.registry import ServerTool, ToolContext, ToolRegistry
from shared.wiring import ServiceOverrides, Services
from tests.support.profiles import chat_catalog
from tests.support.scripted_model import ScriptedModel, Turn
from tests.support.settings import make_settings
from tests.support.sse import parse_sse
from tests.support.tokens import bearer

CONFIRM = {"name": "confirm_booking", "description": "Ask the user.", "parameters": {"type": "object"}}
CONFIRM_CALL = ("call_confirm_1", "confirm_booking", "{}")
EMAIL_CALL = ("call_mail_1", "send_email", '{"to": "ann@example.com"}')


def run_body(run: str, thread: str = "th-s", text: str = "hi", **extra: Any) -> dict[str, Any]:
    message = {"id": f"u-{run}", "role": "user", "content": text}
    return {"threadId": thread, "runId": run, "messages": [message], "tools": [], "context": [], **extra}


async def post(client: httpx.AsyncClient, body: dict[str, Any]) -> list[dict[str, Any]]:
    resp = await client.post("/api/v1/agent", json=body, headers=bearer())
    assert resp.status_code == 200, resp.text
    return [f.json() for f in parse_sse(resp.text) if not f.is_comment_only]


async def status_of(client: httpx.AsyncClient, run: str, **who: Any) -> httpx.Response:
    return await client.get(f"/api/v1/agent/runs/{run}", headers=bearer(**who))


async def until_status(client: httpx.AsyncClient, run: str, status: str) -> dict[str, Any]:
    """The run's document once it shows ``status`` (polled: the run is admitted by a request still in flight)."""
    for _ in range(400):
        resp = await status_of(client, run)
        if resp.status_code == 200 and resp.json()["status"] == status:
            return dict(resp.json())
        await asyncio.sleep(0.01)
    raise AssertionError(f"{run} never showed {status}: {resp.status_code} {resp.text}")


def answer_id(events: list[dict[str, Any]]) -> str:
    return str(next(e["messageId"] for e in events if e["type"] == "TEXT_MESSAGE_START"))


async def test_a_run_shows_running_then_succeeded_with_its_usage_and_the_ids_of_its_messages(
    make_services: Any, asgi_client: Any
) -> None:
    # GIVEN a model that takes a moment to answer
    services = make_services(ScriptedModel(Turn(text=["Hello", " there"], delay_s=0.3, input_tokens=12)))
    async with asgi_client(services) as client:
        # WHEN a run is started and its status read while it runs, then after it ended
        started = asyncio.create_task(post(client, run_body("run-1")))
        running = await until_status(client, "run-1", "running")
        events = await started
        ended = (await status_of(client, "run-1")).json()
    # THEN while running: its thread, its start and last heartbeat, its stored input, no outcome yet
    assert (running["runId"], running["threadId"], running["messageIds"]) == ("run-1", "th-s", ["u-run-1"])
    assert {"createdAt", "heartbeatAt"} <= set(running) and not {"endedAt", "outcome", "error"} & set(running)
    # AND once ended: succeeded, the usage RUN_FINISHED reported, both messages it stored, in thread order
    assert ended["status"] == "succeeded"
    assert ended["outcome"] == {"type": "success"}
    assert ended["usage"] == events[-1]["usage"]
    assert ended["usage"][0]["inputTokens"] == 12 and ended["usage"][0]["outputTokens"] == 5
    assert ended["messageIds"] == ["u-run-1", answer_id(events)]
    assert ended["endedAt"] >= ended["createdAt"] and "heartbeatAt" not in ended


async def test_a_failed_run_shows_its_error_code(make_services: Any, asgi_client: Any) -> None:
    # GIVEN a model that fails  WHEN a run ends with RUN_ERROR
    services = make_services(ScriptedModel(Turn(raise_error=ModelError("upstream 500", code="model_unavailable"))))
    async with asgi_client(services) as client:
        events = await post(client, run_body("run-f"))
        doc = (await status_of(client, "run-f")).json()
    # THEN the document is failed with the same code and message, and the user's message it stored
    assert events[-1]["type"] == "RUN_ERROR"
    assert doc["status"] == "failed"
    assert doc["error"] == {"code": "model_unavailable", "message": events[-1]["message"]}
    assert doc["messageIds"] == ["u-run-f"] and "outcome" not in doc


async def test_a_cancelled_run_shows_cancelled(make_services: Any, asgi_client: Any) -> None:
    # GIVEN a run whose model is slow  WHEN it is cancelled while it runs
    services = make_services(ScriptedModel(Turn(text=["slow"], delay_s=5)))
    async with asgi_client(services) as client:
        started = asyncio.create_task(post(client, run_body("run-c")))
        await until_status(client, "run-c", "running")
        assert (await client.post("/api/v1/agent/runs/run-c/cancel", headers=bearer())).status_code == 200
        flagged = (await status_of(client, "run-c")).json()
        await started
        doc = (await status_of(client, "run-c")).json()
    # THEN the cancel request shows while it winds down, then the run is cancelled
    assert flagged["status"] == "cancelled" or flagged.get("cancelRequested") is True
    assert (doc["status"], doc["outcome"]) == ("cancelled", {"type": "cancelled"})


class Outbox:
    async def __call__(self, arguments: dict[str, Any], ctx: ToolContext) -> str:
        return json.dumps({"sent": True})


def approval_services(store: Any, stream: Any, model: ScriptedModel) -> Services:
    """A profile whose send_* tools need a person's approval, and one client tool (confirm_*)."""
    send = ServerTool(
        spec=ToolSpec(name="send_email", description="Send.", parameters={"type": "object"}), handler=Outbox()
    )
    catalog = chat_catalog(
        allowlist=["get_current_time", "send_email"], require_approval=["send_*"], frontend_allowlist=["confirm_*"]
    )
    tools = ToolRegistry({"get_current_time": make_clock_tool(), "send_email": send})
    return Services(
        make_settings(),
        overrides=ServiceOverrides(store=store, stream=stream, model=model, profiles=catalog, tools=tools),
    )


async def test_a_run_that_ended_on_an_interrupt_is_interrupted_with_its_interrupts(
    store: Any, redis_stream: Any, asgi_client: Any
) -> None:
    # GIVEN a model that calls a tool needing approval  WHEN the run ends with the interrupt outcome
    services = approval_services(store, redis_stream, ScriptedModel(Turn(text=["Sending."], tool_calls=[EMAIL_CALL])))
    async with asgi_client(services) as client:
        events = await post(client, run_body("run-i"))
        doc = (await status_of(client, "run-i")).json()
    # THEN the document is interrupted, with the very interrupts RUN_FINISHED carried
    assert events[-1]["outcome"]["type"] == "interrupt"
    assert doc["status"] == "interrupted"
    assert doc["outcome"] == events[-1]["outcome"]
    assert doc["messageIds"] == ["u-run-i", answer_id(events)]


async def test_a_run_that_handed_tool_calls_to_the_client_names_them(
    store: Any, redis_stream: Any, asgi_client: Any
) -> None:
    # GIVEN a model that calls the client's confirm_booking  WHEN the run ends handing it to the client
    model = ScriptedModel(Turn(text=["Let me ask."], tool_calls=[CONFIRM_CALL]))
    async with asgi_client(approval_services(store, redis_stream, model)) as client:
        await post(client, run_body("run-p", tools=[CONFIRM]))
        doc = (await status_of(client, "run-p")).json()
    # THEN it succeeded, and its outcome names the pending call
    assert (doc["status"], doc["outcome"]) == (
        "succeeded",
        {"type": "success", "pendingToolCallIds": ["call_confirm_1"]},
    )


async def test_a_run_waiting_its_turn_is_queued(make_services: Any, asgi_client: Any) -> None:
    # GIVEN a run streaming on a thread  WHEN a second message is sent with the enqueue strategy
    services = make_services(ScriptedModel(Turn(text=["first"], delay_s=1.0), Turn(text=["second"])))
    async with asgi_client(services) as client:
        first = asyncio.create_task(post(client, run_body("run-1")))
        await until_status(client, "run-1", "running")
        second = asyncio.create_task(post(client, run_body("run-2", forwardedProps={"multitaskStrategy": "enqueue"})))
        queued = await until_status(client, "run-2", "queued")
        await first
        await second
        done = (await status_of(client, "run-2")).json()
    # THEN it shows queued (no messages stored yet) until its turn, then it runs and succeeds
    assert (queued["threadId"], queued["messageIds"]) == ("th-s", [])
    assert done["status"] == "succeeded"


async def test_another_users_or_another_tenants_run_is_404(make_services: Any, asgi_client: Any) -> None:
    # GIVEN user-1's run in tenant-1
    services = make_services(ScriptedModel(Turn(text=["secret answer"])))
    async with asgi_client(services) as client:
        await post(client, run_body("run-1"))
        # WHEN another user of the tenant, the same user id in another tenant, or an unknown id is asked about
        answers = [
            await status_of(client, "run-1", user="user-2"),
            await status_of(client, "run-1", tenant="tenant-2"),
            await status_of(client, "run-404"),
            await client.get("/api/v1/threads/th-s/runs", headers=bearer(user="user-2")),
            await client.get("/api/v1/threads/th-s/runs", headers=bearer(tenant="tenant-2")),
        ]
        own = await status_of(client, "run-1")
    # THEN each is the same 404, saying nothing of the run
    assert own.status_code == 200
    for resp in answers:
        assert (resp.status_code, resp.json()["error"]["code"]) == (404, "not_found")
        assert "run-1" not in resp.text and "secret" not in resp.text


async def test_a_threads_runs_are_listed_newest_first_a_page_at_a_time(make_services: Any, asgi_client: Any) -> None:
    # GIVEN three runs on a thread, one after the other, and one on another thread
    services = make_services(ScriptedModel(*(Turn(text=[f"answer {i}"]) for i in range(4))))
    async with asgi_client(services) as client:
        for run in ("run-a", "run-b", "run-c"):
            await post(client, run_body(run))
        await post(client, run_body("run-x", thread="th-other"))
        # WHEN listed two a page
        first = (await client.get("/api/v1/threads/th-s/runs?limit=2", headers=bearer())).json()
        cursor = first["nextCursor"]
        second = (await client.get(f"/api/v1/threads/th-s/runs?limit=2&cursor={cursor}", headers=bearer())).json()
        foreign = await client.get(f"/api/v1/threads/th-other/runs?cursor={cursor}", headers=bearer())
    # THEN newest first, each once, each as its status document without the message ids
    assert [r["runId"] for r in first["items"]] == ["run-c", "run-b"]
    assert [r["runId"] for r in second["items"]] == ["run-a"] and "nextCursor" not in second
    assert all(r["status"] == "succeeded" and "messageIds" not in r for r in first["items"] + second["items"])
    # AND a cursor works only on the thread it came from
    assert (foreign.status_code, foreign.json()["error"]["code"]) == (422, "invalid_cursor")


@pytest.mark.parametrize("cursor", ["not-base64!", "eyJ0IjoxfQ=="])
async def test_a_malformed_cursor_is_refused(make_services: Any, asgi_client: Any, cursor: str) -> None:
    async with asgi_client(make_services(ScriptedModel(Turn(text=["a"])))) as client:
        await post(client, run_body("run-a"))
        resp = await client.get(f"/api/v1/threads/th-s/runs?cursor={cursor}", headers=bearer())
    assert (resp.status_code, resp.json()["error"]["code"]) == (422, "invalid_cursor")
