"""Approval of a server tool, end to end on loopback: uvicorn serving the app, a real redis-server, moto, the real
``openai`` client against the test model server, and the official ``@ag-ui/client`` 1.0 answering the interrupt with
``resume`` (resolved and cancelled); ``ag-ui-validate`` checks every stream the client received."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from shared.llm.types import ToolSpec
from shared.tools.clock import make_clock_tool
from shared.tools.registry import ServerTool, ToolContext, ToolRegistry
from shared.wiring import ServiceOverrides, Services
from tests.support.agui_clients import TurnReport, run_js_agent, turn_problems, validate_sse
from tests.support.live_app import serve_app
from tests.support.model_server import ModelServer, ScriptedToolCall, ScriptedTurn
from tests.support.profiles import chat_catalog
from tests.support.settings import make_settings
from tests.support.tokens import bearer

pytestmark = pytest.mark.e2e

SCHEMA = {
    "type": "object",
    "properties": {"to": {"type": "string"}, "subject": {"type": "string"}},
    "required": ["to", "subject"],
    "additionalProperties": False,
}


class Outbox:
    """``send_email``'s handler: what it was asked to send (the side effect that waits for approval)."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    async def __call__(self, arguments: dict[str, Any], ctx: ToolContext) -> str:
        self.sent.append(arguments)
        return json.dumps({"sent": True})


@pytest.fixture
def model_server() -> Iterator[ModelServer]:
    with ModelServer() as server:
        yield server


@pytest.fixture
def outbox() -> Outbox:
    return Outbox()


@pytest.fixture
def live(store: Any, redis_url: str, model_server: ModelServer, outbox: Outbox) -> Iterator[str]:
    settings = make_settings(redis_url=redis_url, llm_base_url=model_server.base_url, llm_api_key="test-key")
    tool = ServerTool(spec=ToolSpec(name="send_email", description="Send an email.", parameters=SCHEMA), handler=outbox)
    overrides = ServiceOverrides(
        store=store,
        tools=ToolRegistry({"get_current_time": make_clock_tool(), "send_email": tool}),
        profiles=chat_catalog(allowlist=["get_current_time", "send_email"], require_approval=["send_email"]),
    )
    with serve_app(Services(settings, overrides=overrides)) as url:
        yield url


def email_turns(answer: str) -> list[ScriptedTurn]:
    call = ScriptedToolCall(name="send_email", arguments='{"to": "ann@example.com", "subject": "Hi"}', id="call_m1")
    return [ScriptedTurn(text=["I will send it. "], tool_calls=[call]), ScriptedTurn(text=[answer])]


def assert_clean(turn: TurnReport) -> None:
    assert turn_problems(turn) == [], turn_problems(turn)
    wire = turn["requests"][0]["response"]
    assert wire is not None
    result = validate_sse(wire["body"])
    assert not result.errors and not result.warnings, result.describe()


def approval_round_trip(live: str, thread: str, answer: dict[str, Any]) -> tuple[TurnReport, TurnReport]:
    report = run_js_agent(
        f"{live}/api/v1/agent",
        bearer(),
        thread,
        [
            {"runId": f"{thread}-1", "userMessage": {"id": "u-1", "content": "Mail Ann hi"}},
            {"runId": f"{thread}-2", "answerInterrupts": answer},  # type: ignore[typeddict-item]
        ],
    )
    first, second = report["turns"]
    return first, second


def test_the_official_client_approves_a_held_call_and_the_tool_runs_once(
    live: str, model_server: ModelServer, outbox: Outbox
) -> None:
    # GIVEN a profile that requires approval for send_email, and a model that calls it, then answers
    model_server.enqueue(*email_turns("Sent."))
    # WHEN the official client runs the turn, then answers the open interrupt with resolved
    first, second = approval_round_trip(live, "th-approve", {"status": "resolved"})
    # THEN the first run ended with the interrupt outcome, which the client holds as pending, and nothing was sent
    assert_clean(first)
    finished = first["events"][-1]["event"]
    assert finished["type"] == "RUN_FINISHED" and finished["outcome"]["type"] == "interrupt"
    (interrupt,) = first["pendingInterrupts"]
    assert (interrupt["reason"], interrupt["toolCallId"], interrupt["responseSchema"]) == ("tool_call", "call_m1",
                                                                                            SCHEMA)
    # AND the client sent resume answering it, the tool ran once and the model answered in that run
    assert_clean(second)
    assert second["requests"][0]["body"]["resume"] == [{"interruptId": interrupt["id"], "status": "resolved"}]
    assert outbox.sent == [{"to": "ann@example.com", "subject": "Hi"}]
    results = [e["event"] for e in second["events"] if e["type"] == "TOOL_CALL_RESULT"]
    assert [r["toolCallId"] for r in results] == ["call_m1"]
    assert second["pendingInterrupts"] == []
    assert any(m["role"] == "assistant" and m.get("content") == "Sent." for m in second["messages"])
    # AND the client holds the call once, with its arguments as the model wrote them, and its result
    calls = [c for m in second["messages"] if m["role"] == "assistant" for c in m.get("toolCalls") or []]
    assert [(c["id"], json.loads(c["function"]["arguments"])) for c in calls] == [
        ("call_m1", {"to": "ann@example.com", "subject": "Hi"})]
    assert [m["toolCallId"] for m in second["messages"] if m["role"] == "tool"] == ["call_m1"]
    # AND the model's request in that run held the tool's own result
    answered = next(m for m in model_server.requests[-1]["messages"] if m["role"] == "tool")
    assert json.loads(answered["content"]) == {"sent": True}


def test_the_official_client_declines_a_held_call_and_the_tool_never_runs(
    live: str, model_server: ModelServer, outbox: Outbox
) -> None:
    model_server.enqueue(*email_turns("Not sent."))
    first, second = approval_round_trip(live, "th-decline", {"status": "cancelled"})
    assert_clean(first)
    assert_clean(second)
    assert second["requests"][0]["body"]["resume"][0]["status"] == "cancelled"
    assert outbox.sent == []
    assert second["pendingInterrupts"] == []
    # AND the model was told the call was declined
    last_request = model_server.requests[-1]["messages"]
    declined = next(m for m in last_request if m["role"] == "tool")
    assert json.loads(declined["content"])["error"]["code"] == "declined"
