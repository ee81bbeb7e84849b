"""Traces of runs on the in-memory adapters, exported to the SDK's in-memory exporter: the span tree of a chat run
with a tool call and with a refused call, a memory run's links, the GenAI attribute names and values, no content
unless it is asked for, and nothing of OpenTelemetry imported with traces off."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import httpx
import pytest

from functions.agent_api.app import create_app
from shared.adapters.in_memory.automation import InMemoryAutomationStore
from shared.adapters.in_memory.memories import InMemoryMemoryStore
from shared.adapters.in_memory.scheduler import InMemoryTaskScheduler
from shared.adapters.in_memory.store import InMemoryStore
from shared.adapters.in_memory.stream import InMemoryEventStream
from shared.auth import mint_local_token
from shared.models import Identity
from shared.settings import Settings
from shared.wiring import ServiceOverrides, Services
from tests.support.scripted_model import ScriptedModel, Turn
from tests.support.traces import by_name, in_memory_traces, parent_name

TENANT, USER = "tenant-1", "user-1"
SECRET = "traces-test-secret-0123456789abcdef"
SECRET_TEXT = "my passport number is ZX-4471-secret-canary"
CLIENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
CLIENT_PARENT = f"00-{CLIENT_TRACE}-b7ad6b7169203331-01"


def services_with(*turns: Turn) -> tuple[Services, InMemoryStore]:
    store = InMemoryStore()
    settings = Settings(jwt_secret=SECRET, auth_mode="hs256", embedded=True, aws_region="us-east-1")
    overrides = ServiceOverrides(
        store=store,
        stream=InMemoryEventStream(),
        memory_store=InMemoryMemoryStore(),
        model=ScriptedModel(*turns),
        automation_store=InMemoryAutomationStore(),
        automation_scheduler=InMemoryTaskScheduler(),
    )
    return Services(settings, overrides=overrides), store


async def chat(services: Services, text: str = "what time is it?", run_id: str = "run-1") -> str:
    token = mint_local_token(SECRET, user_id=USER, tenant_id=TENANT, scopes=())
    body = {"threadId": "th", "runId": run_id, "messages": [{"id": f"m-{run_id}", "role": "user", "content": text}]}
    headers = {"Authorization": f"Bearer {token}", "traceparent": CLIENT_PARENT}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(services)), base_url="http://a") as c:
        response = await c.post("/api/v1/agent", json=body, headers=headers)
    await services.runs.wait_idle()
    assert '"RUN_FINISHED"' in response.text
    return response.text


def tool_turn(name: str) -> Turn:
    return Turn(tool_calls=[("call-1", name, "{}")])


async def test_a_chat_run_with_a_tool_call_is_one_tree_under_the_request_and_the_client_trace() -> None:
    with in_memory_traces() as exported:
        services, _ = services_with(tool_turn("get_current_time"), Turn(text=["it is noon"]))
        await chat(services)
        spans = exported.get_finished_spans()
    named = by_name(spans)
    run = named["invoke_agent chat_default"]
    # every span of the request is in the client's trace
    assert {format(s.context.trace_id, "032x") for s in spans} == {CLIENT_TRACE}
    assert parent_name(named["POST /api/v1/agent"], spans) == "(remote)"
    assert parent_name(run, spans) == "POST /api/v1/agent"
    for child in ("agent.admission", "agent.window.read", "execute_tool get_current_time", "agent.settle"):
        assert parent_name(named[child], spans) == run.name, child
    assert parent_name(named["agent.admission.claim"], spans) == "agent.admission"
    assert parent_name(named["agent.admission.store"], spans) == "agent.admission"
    chats = [s for s in spans if s.name.startswith("chat ")]
    assert len(chats) == 2 and all(parent_name(s, spans) == run.name for s in chats)
    # the run's span ends before the request's: it is exported with the flush before the response's end
    assert run.end_time is not None and named["POST /api/v1/agent"].end_time is not None
    assert run.end_time <= named["POST /api/v1/agent"].end_time
    tool = named["execute_tool get_current_time"].attributes
    assert tool["gen_ai.operation.name"] == "execute_tool" and tool["gen_ai.tool.call.id"] == "call-1"
    assert (tool["agent.tool.decision"], tool["agent.tool.outcome"], tool["agent.tool.kind"]) == (
        "allowed",
        "executed",
        "server",
    )


async def test_the_attributes_follow_the_genai_conventions() -> None:
    with in_memory_traces() as exported:
        services, _ = services_with(Turn(text=["hello"]))
        await chat(services, "hi")
        named = by_name(exported.get_finished_spans())
    run = named["invoke_agent chat_default"].attributes
    assert run["gen_ai.operation.name"] == "invoke_agent" and run["gen_ai.agent.name"] == "chat_default"
    assert run["gen_ai.conversation.id"] == "th" and run["agent.run.id"] == "run-1"
    assert (run["agent.executor"], run["agent.tenant.id"], run["agent.run.outcome"]) == ("worker", TENANT, "succeeded")
    assert run["gen_ai.usage.input_tokens"] > 0 and run["gen_ai.usage.output_tokens"] > 0
    assert not any("user" in key for key in run)  # no user id, in clear or hashed
    (turn,) = [s for s in named.values() if s.name.startswith("chat ")]
    attrs = turn.attributes
    assert turn.name == f"chat {attrs['gen_ai.request.model']}"
    assert attrs["gen_ai.operation.name"] == "chat" and attrs["gen_ai.provider.name"] == "scripted"
    assert tuple(attrs["gen_ai.response.finish_reasons"]) == ("stop",)
    assert attrs["gen_ai.response.time_to_first_chunk"] >= 0
    for key in ("gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens", "gen_ai.usage.cache_read.input_tokens"):
        assert isinstance(attrs[key], int), key
    assert named["POST /api/v1/agent"].attributes["http.route"] == "/api/v1/agent"


async def test_a_refused_call_is_a_span_with_the_refusal_and_no_handler() -> None:
    with in_memory_traces() as exported:
        services, _ = services_with(tool_turn("delete_everything"), Turn(text=["I cannot"]))
        await chat(services)
        spans = exported.get_finished_spans()
    refused = by_name(spans)["execute_tool delete_everything"]
    assert parent_name(refused, spans) == "invoke_agent chat_default"
    attrs = refused.attributes
    assert (attrs["agent.tool.decision"], attrs["agent.tool.outcome"]) == ("refused", "refused")
    assert attrs["agent.tool.refusal.layer"] and attrs["agent.tool.refusal.reason"]
    assert not [s for s in spans if parent_name(s, spans) == refused.name]  # nothing ran under it


def all_text(spans: Any) -> str:
    parts: list[str] = []
    for span in spans:
        parts += [span.name, json.dumps(dict(span.attributes or {}), default=str)]
        parts += [json.dumps(dict(e.attributes or {}), default=str) for e in span.events]
    return "\n".join(parts)


async def test_no_message_text_reaches_a_span_by_default() -> None:
    with in_memory_traces() as exported:
        services, _ = services_with(tool_turn("get_current_time"), Turn(text=["noted"]))
        await chat(services, SECRET_TEXT)
        text = all_text(exported.get_finished_spans())
    assert "ZX-4471" not in text and "noted" not in text
    assert "gen_ai.input.messages" not in text and "gen_ai.tool.call.result" not in text


async def test_content_is_recorded_when_asked_for_and_never_a_credential() -> None:
    with in_memory_traces(capture_content=True) as exported:
        services, _ = services_with(tool_turn("get_current_time"), Turn(text=["noted"]))
        await chat(services, f"{SECRET_TEXT} and my key is sk-abcdef1234567890")
        spans = exported.get_finished_spans()
    text = all_text(spans)
    assert "ZX-4471" in text and "noted" in text and "gen_ai.tool.call.result" in text
    assert "sk-abcdef1234567890" not in text and SECRET not in text and "Bearer" not in text


async def test_a_memory_run_has_a_trace_of_its_own_linked_to_the_run_it_read() -> None:
    with in_memory_traces() as exported:
        services, _ = services_with(Turn(text=["hello"]), Turn(text=["nothing to remember"]))
        await chat(services, "I live in Lisbon")
        owner = Identity(tenant_id=TENANT, user_id=USER)
        report = await services.memory_extraction.extract(owner, "th", run_id="mem-1")
        spans = exported.get_finished_spans()
    assert report.status == "extracted"
    worker = by_name(spans)["invoke_agent chat_default"]
    (memory,) = [s for s in spans if s.name.startswith("invoke_agent ") and s.attributes["agent.run.id"] == "mem-1"]
    assert memory.parent is None and memory.context.trace_id != worker.context.trace_id
    assert memory.attributes["agent.executor"] == "memory"
    assert [(link.context.trace_id, link.context.span_id) for link in memory.links] == [
        (worker.context.trace_id, worker.context.span_id)
    ]
    assert memory.links[0].attributes["agent.run.id"] == "run-1"
    memory_chat = [s for s in spans if s.name.startswith("chat ") and s.context.trace_id == memory.context.trace_id]
    assert len(memory_chat) == 1


def test_with_traces_off_no_opentelemetry_module_is_imported() -> None:
    # redis-py would import opentelemetry.sdk.metrics by itself (the warm-up's first step keeps it from it)
    code = (
        "import sys, asyncio\n"
        "from functions.agent_api.app import create_app\n"
        "from shared.wiring import Services\n"
        "from shared.settings import Settings\n"
        "s = Services(Settings(jwt_secret='x'*32, auth_mode='hs256', embedded=True, aws_region='us-east-1'))\n"
        "s.warm_up()\n"
        "import shared.runs.service, shared.executors.worker, shared.llm.openai_chat\n"
        "ours = ('opentelemetry.sdk', 'opentelemetry.exporter', 'shared.tracing.otel', 'google.protobuf')\n"
        "import shared.adapters.redis_stream\n"
        "print(sorted(m for m, mod in sys.modules.items() if mod is not None and m.startswith(ours)))\n"
    )
    env = {"PATH": "/usr/bin:/bin", "AWS_DEFAULT_REGION": "us-east-1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("protocol", ["grpc", "http/json"])
def test_an_unsupported_protocol_leaves_traces_off(protocol: str) -> None:
    from shared.tracing.api import tracer
    from shared.tracing.setup import configure_tracing

    settings = Settings(otel_exporter_otlp_endpoint="http://127.0.0.1:9", otel_exporter_otlp_protocol=protocol)
    assert configure_tracing(settings).enabled is False and tracer().enabled is False


async def test_an_automation_run_on_a_thread_is_a_trace_of_its_own_linked_to_the_chat_run_it_read() -> None:
    from shared.automation.models import AutomationTaskSpec, TaskRef

    with in_memory_traces() as exported:
        services, _ = services_with(Turn(text=["hello"]), Turn(text=["a summary"]))
        await chat(services, "remember the meeting")
        owner = Identity(tenant_id=TENANT, user_id=USER)
        spec = AutomationTaskSpec(name="Brief", schedule_expression="rate(1 day)", prompt="summarise", thread_id="th")
        task = await services.automation_service.create(owner, spec)
        outcome = await services.automation_runner.fire(TaskRef(task_id=task.task_id), "fire-1")
        spans = exported.get_finished_spans()
    assert outcome.status == "succeeded"
    runs = {s.attributes["agent.run.id"]: s for s in spans if s.name.startswith("invoke_agent ")}
    chat_run, automation = runs["run-1"], runs[outcome.run_id]
    assert automation.parent is None and automation.attributes["agent.origin"] == "automation"
    assert [(link.context.trace_id, link.context.span_id) for link in automation.links] == [
        (chat_run.context.trace_id, chat_run.context.span_id)
    ]
