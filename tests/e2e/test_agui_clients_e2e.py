"""End to end on loopback: uvicorn serving the app, a real redis-server, moto, the real ``openai`` client against
the OpenAI-compatible test model server, and the real AG-UI client (node) and validator."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.agui_clients import run_js_agent, turn_problems, validate_sse
from tests.support.live_app import serve_with_model
from tests.support.model_server import (  # noqa: F401  (model_server_fixture: the fixture)
    ModelServer,
    ScriptedToolCall,
    ScriptedTurn,
    model_server_fixture,
)
from tests.support.sse import iter_sse_frames
from tests.support.tokens import bearer

pytestmark = pytest.mark.e2e


@pytest.fixture
def live(store: Any, redis_url: str, model_server: ModelServer) -> Iterator[str]:
    with serve_with_model(store, redis_url, model_server) as url:
        yield url


def time_call_turns() -> list[ScriptedTurn]:
    return [
        ScriptedTurn(
            text=["Let me check. "],
            tool_calls=[ScriptedToolCall(name="get_current_time", arguments='{"timezone": "Asia/Shanghai"}')],
        ),
        ScriptedTurn(text=["It is ", "evening ", "in Shanghai."]),
    ]


def test_js_client_runs_a_tool_call_turn_cleanly_and_a_second_turn_stores_no_duplicate(
    live: str, model_server: ModelServer
) -> None:
    # GIVEN a model that calls the time tool, answers, then answers the second turn
    model_server.enqueue(*time_call_turns(), ScriptedTurn(text=["You are welcome."]))
    headers = bearer()
    # WHEN the official @ag-ui/client HttpAgent runs two turns on one thread
    report = run_js_agent(
        f"{live}/api/v1/agent",
        headers,
        "thread-js",
        [
            {"runId": "run-js-1", "userMessage": {"id": "u-1", "content": "What time is it in Shanghai?"}},
            {"runId": "run-js-2", "userMessage": {"id": "u-2", "content": "Thanks!"}},
        ],
    )
    first, second = report["turns"]
    # THEN the client saw no error in either turn
    assert turn_problems(first) == [] and turn_problems(second) == []
    # AND its newMessages hold the assistant message with the tool call and the tool result
    new = first["newMessages"] or []
    assistant = next(m for m in new if m["role"] == "assistant" and m.get("toolCalls"))
    assert assistant["toolCalls"][0]["function"]["name"] == "get_current_time"
    tool = next(m for m in new if m["role"] == "tool")
    assert tool["toolCallId"] == assistant["toolCalls"][0]["id"]
    assert json.loads(tool["content"])["timezone"] == "Asia/Shanghai"
    # AND the second turn re-sent the first turn's messages, yet the thread holds each message once
    resent = second["requests"][0]["body"]["messages"]
    assert len(resent) > 2
    history = httpx.get(f"{live}/api/v1/threads/thread-js/history", headers=headers).json()["items"]
    ids = [m["id"] for m in history]
    assert len(ids) == len(set(ids))
    assert [m["role"] for m in history] == ["user", "assistant", "tool", "assistant", "user", "assistant"]
    # AND ag-ui-validate finds neither error nor warning on the stream the client received
    wire = first["requests"][0]["response"]
    assert wire is not None
    result = validate_sse(wire["body"])
    assert not result.errors and not result.warnings, result.describe()
    assert result.findings == (), result.describe()  # not even an info finding


async def test_events_reach_the_client_before_the_model_has_finished(live: str, model_server: ModelServer) -> None:
    # GIVEN a model that pauses between chunks
    model_server.enqueue(ScriptedTurn(text=["one ", "two ", "three ", "four ", "five"], chunk_delay_s=0.4))
    body = {
        "threadId": "thread-inc",
        "runId": "run-inc",
        "messages": [{"id": "u-1", "role": "user", "content": "count"}],
    }
    seen_before_model_finished: list[str] = []
    types: list[str] = []
    async with (
        httpx.AsyncClient(timeout=30) as client,
        client.stream("POST", f"{live}/api/v1/agent", json=body, headers=bearer()) as resp,
    ):
        async for frame in iter_sse_frames(resp):
            if frame.data is None:
                continue
            event_type = frame.json()["type"]
            types.append(event_type)
            served = model_server.served
            if not served or not served[0].completed:
                seen_before_model_finished.append(event_type)
    # THEN the first text delta arrived while the model was still streaming
    assert "TEXT_MESSAGE_CONTENT" in seen_before_model_finished
    assert types[-1] == "RUN_FINISHED"
    assert model_server.served[0].completed


def test_model_requests_carry_thinking_off_and_the_stored_context(live: str, model_server: ModelServer) -> None:
    model_server.enqueue(*time_call_turns())
    with httpx.Client(timeout=30) as client:
        client.post(
            f"{live}/api/v1/agent",
            json={
                "threadId": "thread-ctx",
                "runId": "run-ctx",
                "messages": [{"id": "u-1", "role": "user", "content": "time?"}],
            },
            headers=bearer(),
        )
    first, second = model_server.requests[:2]
    assert first["model"] == "qwen3.5-30b-a3b"
    assert first["chat_template_kwargs"] == {"enable_thinking": False} or first.get("enable_thinking") is False
    assert [t["function"]["name"] for t in first["tools"]] == ["get_current_time", "update_state"]
    assert [m["role"] for m in second["messages"]][-3:] == ["user", "assistant", "tool"]


CONFIRM_BOOKING = {
    "name": "confirm_booking",
    "description": "Ask the user to confirm the booking before it is made.",
    "parameters": {
        "type": "object",
        "properties": {"hotel": {"type": "string"}, "nights": {"type": "integer", "minimum": 1}},
        "required": ["hotel", "nights"],
        "additionalProperties": False,
    },
}


@pytest.fixture(params=["shipped chat_default", "narrowed to confirm_*"])
def live_frontend(
    request: pytest.FixtureRequest, store: Any, redis_url: str, model_server: ModelServer
) -> Iterator[str]:
    """The app on the shipped catalog (chat_default offers what the client declares, docs/policy.md §3.4), or on a
    profile narrowed to ``confirm_*``: the client's tool round trip is the same on both."""
    from tests.support.profiles import chat_catalog

    catalog = chat_catalog(frontend_allowlist=["confirm_*"]) if request.param.startswith("narrowed") else None
    with serve_with_model(store, redis_url, model_server, catalog) as url:
        yield url


def test_js_client_round_trip_of_a_front_end_tool(live_frontend: str, model_server: ModelServer) -> None:
    # GIVEN a model that calls the client's confirm_booking tool, then answers once it has the result
    model_server.enqueue(
        ScriptedTurn(
            tool_calls=[
                ScriptedToolCall(name="confirm_booking", arguments='{"hotel": "Ritz", "nights": 2}', id="call_confirm")
            ]
        ),
        ScriptedTurn(text=["Booked: ", "two nights at the Ritz."]),
    )
    # WHEN the official @ag-ui/client declares the tool and runs; then adds the tool's result and runs again
    report = run_js_agent(
        f"{live_frontend}/api/v1/agent",
        bearer(),
        "thread-fe-js",
        [
            {
                "runId": "run-fe-1",
                "userMessage": {"id": "u-1", "content": "Book the Ritz for two nights"},
                "tools": [CONFIRM_BOOKING],
            },
            {
                "runId": "run-fe-2",
                "toolResult": {"id": "tool-1", "content": '{"confirmed": true}'},
                "tools": [CONFIRM_BOOKING],
            },
        ],
    )
    first, second = report["turns"]
    assert turn_problems(first) == [] and turn_problems(second) == []
    # THEN run 1 streamed the call and ended with RUN_FINISHED, without a result (the client runs the tool)
    types = [e["type"] for e in first["events"]]
    assert types[-1] == "RUN_FINISHED" and "TOOL_CALL_END" in types and "TOOL_CALL_RESULT" not in types
    assert first["events"][-1]["event"]["outcome"] == {"type": "success", "pendingToolCallIds": ["call_confirm"]}
    call = next(m for m in first["messages"] if m["role"] == "assistant" and m.get("toolCalls"))["toolCalls"][0]
    assert (call["id"], call["function"]["name"]) == ("call_confirm", "confirm_booking")
    assert json.loads(call["function"]["arguments"]) == {"hotel": "Ritz", "nights": 2}
    # AND run 2 POSTed the tool message, and the model's second request holds the call and its result in order
    sent = second["requests"][0]["body"]["messages"]
    assert {"id": "tool-1", "role": "tool", "toolCallId": "call_confirm", "content": '{"confirmed": true}'}.items() <= (
        next(m for m in sent if m["role"] == "tool").items()
    )
    assert len(model_server.requests) == 2
    request = model_server.requests[1]
    tail = [m for m in request["messages"] if m["role"] != "system"]
    assert [m["role"] for m in tail] == ["user", "assistant", "tool"]
    assert tail[1]["tool_calls"][0]["id"] == "call_confirm" and tail[2]["tool_call_id"] == "call_confirm"
    assert [t["function"]["name"] for t in request["tools"]] == ["confirm_booking", "get_current_time", "update_state"]
    # AND the run answered, and both streams pass ag-ui-validate
    text = "".join(e["event"].get("delta", "") for e in second["events"] if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert text == "Booked: two nights at the Ritz."
    for turn in (first, second):
        result = validate_sse(turn["requests"][0]["response"]["body"])
        assert not result.errors and not result.warnings, result.describe()
