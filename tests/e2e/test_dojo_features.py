"""The AG-UI Dojo's feature list as our own suite: one test per feature, the official ``@ag-ui/client`` driven
against the app (uvicorn on loopback, real Redis, moto, the real ``openai`` client against the scripted model
server), asserting on the events, the client's resulting messages and state, and ``ag-ui-validate`` on every stream.

The Dojo (``ag-ui-protocol/ag-ui``, ``apps/dojo``) runs these features in its Playwright tests; the app itself is
not needed (it is a Next.js build). docs/protocols/agent/sse-events.md "The AG-UI Dojo's features" lists the events
each feature uses.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from shared.wiring import ServiceOverrides, Services
from tests.support.agui_clients import TurnReport, run_js_agent, turn_problems, validate_sse
from tests.support.live_app import serve_app
from tests.support.model_server import ModelServer, ScriptedToolCall, ScriptedTurn
from tests.support.shared_state import bearer_for, dojo_settings

pytestmark = pytest.mark.e2e


@pytest.fixture
def model_server() -> Iterator[ModelServer]:
    with ModelServer() as server:
        yield server


@pytest.fixture
def dojo(store: Any, redis_url: str, model_server: ModelServer) -> Iterator[tuple[str, dict[str, str]]]:
    services = Services(dojo_settings(redis_url, model_server.base_url), overrides=ServiceOverrides(store=store))
    with serve_app(services) as url:
        yield url, bearer_for(services)


def frontend_tool(name: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    schema = {"type": "object", "properties": properties, "required": required, "additionalProperties": False}
    return {"name": name, "description": f"The page's {name}.", "parameters": schema}


def call(name: str, arguments: dict[str, Any], call_id: str) -> ScriptedToolCall:
    return ScriptedToolCall(name=name, arguments=json.dumps(arguments), id=call_id)


def types(turn: TurnReport) -> list[str]:
    return [e["type"] for e in turn["events"]]


def text_of(turn: TurnReport) -> str:
    return "".join(e["event"].get("delta", "") for e in turn["events"] if e["type"] == "TEXT_MESSAGE_CONTENT")


def assert_clean(*turns: TurnReport) -> None:
    """The client saw no problem, RUN_STARTED declared AG-UI 1.0, and ag-ui-validate finds nothing on the wire."""
    for turn in turns:
        assert turn_problems(turn) == []
        assert turn["events"][0]["event"]["protocolVersion"] == "1.0"
        wire = turn["requests"][0]["response"]
        assert wire is not None
        result = validate_sse(wire["body"])
        assert not result.errors and not result.warnings, result.describe()


CHANGE_BACKGROUND = frontend_tool("change_background", {"background": {"type": "string"}}, ["background"])


def test_agentic_chat(dojo: tuple[str, dict[str, str]], model_server: ModelServer) -> None:
    """Chat with a front-end tool: the model calls the page's ``change_background``, the page answers, the model
    goes on."""
    url, headers = dojo
    model_server.enqueue(
        ScriptedTurn(text=["Sure, "], tool_calls=[call("change_background", {"background": "blue"}, "call_bg")]),
        ScriptedTurn(text=["The background is blue now."]),
    )
    report = run_js_agent(
        f"{url}/api/v1/agent",
        headers,
        "dojo-chat",
        [
            {
                "runId": "chat-1",
                "userMessage": {"id": "u1", "content": "Make the background blue"},
                "tools": [CHANGE_BACKGROUND],
            },
            {
                "runId": "chat-2",
                "toolResult": {"id": "t1", "content": "background changed"},
                "tools": [CHANGE_BACKGROUND],
            },
        ],
    )
    first, second = report["turns"]
    assert_clean(first, second)
    assert first["events"][-1]["event"]["outcome"] == {"type": "success", "pendingToolCallIds": ["call_bg"]}
    assert text_of(second) == "The background is blue now."
    assert [m["role"] for m in second["messages"]] == ["user", "assistant", "tool", "assistant"]


def test_backend_tool_rendering(dojo: tuple[str, dict[str, str]], model_server: ModelServer) -> None:
    """A server tool whose call and result are on the stream, for the page to render."""
    url, headers = dojo
    model_server.enqueue(
        ScriptedTurn(tool_calls=[call("get_current_time", {"timezone": "Asia/Tokyo"}, "call_time")]),
        ScriptedTurn(text=["It is evening in Tokyo."]),
    )
    report = run_js_agent(
        f"{url}/api/v1/agent",
        headers,
        "dojo-backend",
        [
            {"runId": "backend-1", "userMessage": {"id": "u1", "content": "What time is it in Tokyo?"}},
        ],
    )
    (turn,) = report["turns"]
    assert_clean(turn)
    kinds = types(turn)
    assert kinds.index("TOOL_CALL_START") < kinds.index("TOOL_CALL_END") < kinds.index("TOOL_CALL_RESULT")
    tool = next(m for m in turn["messages"] if m["role"] == "tool")
    assert tool["toolCallId"] == "call_time" and json.loads(tool["content"])["timezone"] == "Asia/Tokyo"
    assert text_of(turn) == "It is evening in Tokyo."


GENERATE_STEPS = frontend_tool(
    "generate_task_steps",
    {
        "steps": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "description": {"type": "string"},
                    "status": {"type": "string", "enum": ["enabled", "disabled"]},
                },
                "required": ["description", "status"],
            },
        }
    },
    ["steps"],
)


def test_human_in_the_loop(dojo: tuple[str, dict[str, str]], model_server: ModelServer) -> None:
    """The model proposes steps through a front-end tool; the user edits them; the next run gets the answer."""
    url, headers = dojo
    steps = [{"description": "Buy flour", "status": "enabled"}, {"description": "Bake", "status": "enabled"}]
    model_server.enqueue(
        ScriptedTurn(tool_calls=[call("generate_task_steps", {"steps": steps}, "call_steps")]),
        ScriptedTurn(text=["Skipping the flour; baking."]),
    )
    chosen = json.dumps({"accepted": [steps[1]]})
    report = run_js_agent(
        f"{url}/api/v1/agent",
        headers,
        "dojo-hitl",
        [
            {"runId": "hitl-1", "userMessage": {"id": "u1", "content": "Plan a cake"}, "tools": [GENERATE_STEPS]},
            {"runId": "hitl-2", "toolResult": {"id": "t1", "content": chosen}, "tools": [GENERATE_STEPS]},
        ],
    )
    first, second = report["turns"]
    assert_clean(first, second)
    assert "TOOL_CALL_RESULT" not in types(first)  # the page answers, not the server
    proposed = next(m for m in first["messages"] if m.get("toolCalls"))["toolCalls"][0]
    assert json.loads(proposed["function"]["arguments"]) == {"steps": steps}
    # THEN the model's next request holds the user's choice as the call's result
    request = model_server.requests[-1]
    assert next(m for m in request["messages"] if m["role"] == "tool")["content"] == chosen
    assert text_of(second) == "Skipping the flour; baking."


GENERATE_HAIKU = frontend_tool(
    "generate_haiku",
    {
        "japanese": {"type": "array", "items": {"type": "string"}},
        "english": {"type": "array", "items": {"type": "string"}},
    },
    ["japanese", "english"],
)


def test_tool_based_generative_ui(dojo: tuple[str, dict[str, str]], model_server: ModelServer) -> None:
    """A front-end tool the page renders from its arguments, streamed as they come."""
    url, headers = dojo
    haiku = {
        "japanese": ["古池や", "蛙飛び込む", "水の音"],
        "english": ["An old pond", "a frog jumps in", "water's sound"],
    }
    model_server.enqueue(ScriptedTurn(tool_calls=[call("generate_haiku", haiku, "call_haiku")]))
    report = run_js_agent(
        f"{url}/api/v1/agent",
        headers,
        "dojo-haiku",
        [
            {
                "runId": "haiku-1",
                "userMessage": {"id": "u1", "content": "A haiku about a pond"},
                "tools": [GENERATE_HAIKU],
            },
        ],
    )
    (turn,) = report["turns"]
    assert_clean(turn)
    args = "".join(e["event"]["delta"] for e in turn["events"] if e["type"] == "TOOL_CALL_ARGS")
    assert json.loads(args) == haiku
    rendered = next(m for m in turn["messages"] if m.get("toolCalls"))["toolCalls"][0]
    assert (rendered["function"]["name"], json.loads(rendered["function"]["arguments"])) == ("generate_haiku", haiku)


RECIPE = {"recipe": {"title": "Pancakes", "ingredients": [{"name": "flour", "amount": "200g"}]}}


def test_shared_state(dojo: tuple[str, dict[str, str]], model_server: ModelServer) -> None:
    """The page's state goes in with the run, the agent changes it, the page's copy follows; the next run, and the
    history, start from it."""
    url, headers = dojo
    add_milk = [{"op": "add", "path": "/recipe/ingredients/-", "value": {"name": "milk", "amount": "300ml"}}]
    model_server.enqueue(
        ScriptedTurn(tool_calls=[call("update_state", {"patch": add_milk}, "call_state")]),
        ScriptedTurn(text=["Added milk."]),
        ScriptedTurn(text=["Two ingredients."]),
    )
    report = run_js_agent(
        f"{url}/api/v1/agent",
        headers,
        "dojo-state",
        [
            {"runId": "state-1", "userMessage": {"id": "u1", "content": "Add milk"}, "state": RECIPE},
            {"runId": "state-2", "userMessage": {"id": "u2", "content": "How many ingredients?"}},
        ],
    )
    first, second = report["turns"]
    assert_clean(first, second)
    assert first["requests"][0]["body"]["state"] == RECIPE
    kinds = types(first)
    assert kinds[:2] == ["RUN_STARTED", "STATE_SNAPSHOT"] and kinds.count("STATE_DELTA") == 1
    assert first["events"][1]["event"]["snapshot"] == RECIPE
    changed = {
        "recipe": {
            **RECIPE["recipe"],
            "ingredients": [*RECIPE["recipe"]["ingredients"], {"name": "milk", "amount": "300ml"}],
        }
    }
    # THEN the client's own state is the changed one, and it sends that with its next run
    assert first["state"] == changed
    assert second["requests"][0]["body"]["state"] == changed
    assert second["events"][1]["event"]["snapshot"] == changed and second["state"] == changed
    # AND the model read the state in its run notes, and the history API returns it
    notes = model_server.requests[-1]["messages"][-1]["content"]
    assert "Shared state" in notes and '{"name":"milk","amount":"300ml"}' in notes
    history = httpx.get(f"{url}/api/v1/threads/dojo-state/history", headers=headers).json()
    assert history["state"] == changed


def test_agentic_generative_ui(dojo: tuple[str, dict[str, str]], model_server: ModelServer) -> None:
    """Progress as state: a STATE_SNAPSHOT, then one STATE_DELTA per step as the agent works through its plan."""
    url, headers = dojo
    plan = [{"description": d, "status": "pending"} for d in ("Research", "Draft", "Review")]
    turns = [
        ScriptedTurn(
            tool_calls=[call("update_state", {"patch": [{"op": "add", "path": "/steps", "value": plan}]}, "call_plan")]
        )
    ]
    for index in range(len(plan)):
        patch = [
            {"op": "test", "path": f"/steps/{index}/status", "value": "pending"},
            {"op": "replace", "path": f"/steps/{index}/status", "value": "completed"},
        ]
        turns.append(ScriptedTurn(tool_calls=[call("update_state", {"patch": patch}, f"call_step_{index}")]))
    turns.append(ScriptedTurn(text=["All three steps are done."]))
    model_server.enqueue(*turns)
    report = run_js_agent(
        f"{url}/api/v1/agent",
        headers,
        "dojo-gen-ui",
        [
            {"runId": "gen-1", "userMessage": {"id": "u1", "content": "Write the report"}},
        ],
    )
    (turn,) = report["turns"]
    assert_clean(turn)
    state_events = [k for k in types(turn) if k.startswith("STATE_")]
    assert state_events == ["STATE_SNAPSHOT"] + ["STATE_DELTA"] * 4
    assert turn["events"][1]["event"]["snapshot"] == {}
    assert turn["state"] == {"steps": [{**step, "status": "completed"} for step in plan]}
    assert text_of(turn) == "All three steps are done."
