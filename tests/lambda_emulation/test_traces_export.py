"""Traces leave a Lambda environment before it freezes: two instances started as Lambda starts the streaming
function (run.sh), exporting over OTLP/HTTP to a real receiver in the test that decodes the protobuf.

The batch processor's own timer is set to a minute, so a span reaches the receiver only through the flush the
request span does before the response's last byte (shared/tracing/asgi.py): the environment is frozen (SIGSTOP)
the moment the response ends, as Lambda does, and every span of the run must be in the receiver by then."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest

from shared.adapters.aws.table_schema import create_table
from shared.auth import mint_local_token
from tests.support.lambda_instance import Instance, function_env, started
from tests.support.model_server import ModelServer, ScriptedToolCall, ScriptedTurn
from tests.support.traces import OtlpReceiver, ReceivedSpan, otlp_receiver

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

REGION, TABLE = "us-east-1", "traces-table"
SECRET = "traces-export-secret-0123456789abcdef"
RECOGNISABLE = "the-canary-phrase-7731"


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with otlp_receiver() as received:
        yield received


@pytest.fixture
def traced_instances(
    dynamodb_url: str, redis_url: str, model_server: ModelServer, receiver: OtlpReceiver, tmp_path: Path
) -> Iterator[tuple[Instance, Instance]]:
    create_table(boto3.client("dynamodb", region_name=REGION, endpoint_url=dynamodb_url), TABLE)
    env = {
        **function_env(dynamodb_url, redis_url, model_server.base_url, table=TABLE, secret=SECRET),
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_SERVICE_NAME": "agent-api-test",
        "OTEL_BSP_SCHEDULE_DELAY": "60000",  # only the flush exports
    }
    with started(env, tmp_path) as (a, b):
        yield a, b


def headers(traceparent: str) -> dict[str, str]:
    token = mint_local_token(SECRET, user_id="user-1", tenant_id="tenant-1", scopes=())
    return {"Authorization": f"Bearer {token}", "traceparent": traceparent}


def run_body(thread: str, run: str, text: str) -> dict[str, Any]:
    return {"threadId": thread, "runId": run, "messages": [{"id": f"m-{run}", "role": "user", "content": text}]}


async def run_and_freeze(instance: Instance, payload: dict[str, Any], traceparent: str) -> str:
    """POST a run, read the response to its end, and freeze the instance that moment."""
    async with (
        httpx.AsyncClient(timeout=30) as client,
        client.stream("POST", f"{instance.url}/api/v1/agent", json=payload, headers=headers(traceparent)) as resp,
    ):
        assert resp.status_code == 200
        text = "".join([chunk async for chunk in resp.aiter_text()])
    instance.freeze()
    return text


def tree(spans: list[ReceivedSpan], trace_id: str) -> dict[str, ReceivedSpan]:
    return {s.name: s for s in spans if s.trace_id == trace_id}


async def test_each_run_is_one_trace_under_the_clients_traceparent_and_a_freeze_loses_none_of_it(
    traced_instances: tuple[Instance, Instance], model_server: ModelServer, receiver: OtlpReceiver
) -> None:
    a, b = traced_instances
    first_trace, second_trace = "4bf92f3577b34da6a3ce929d0e0e4736", "5cf92f3577b34da6a3ce929d0e0e4737"
    model_server.enqueue(ScriptedTurn(tool_calls=[ScriptedToolCall(name="get_current_time", arguments="{}")]))
    model_server.enqueue(ScriptedTurn(text=["It ", "is noon."]))
    # GIVEN a run on A with a tool call, in the client's trace; A is frozen the moment the response ends
    text = await run_and_freeze(a, run_body("th-1", "run-1", RECOGNISABLE), f"00-{first_trace}-00f067aa0ba902b7-01")
    assert '"RUN_FINISHED"' in text
    # WHEN a second run goes through B in another trace, and B is frozen too
    model_server.enqueue(ScriptedTurn(text=["Again."]))
    await run_and_freeze(b, run_body("th-2", "run-2", "again"), f"00-{second_trace}-00f067aa0ba902b8-01")
    # THEN each run is one trace, under the client's span, with every span of the run already received
    first = tree(receiver.spans, first_trace)
    request = first["POST /api/v1/agent"]
    assert request.parent_span_id == "00f067aa0ba902b7"
    run = first["invoke_agent chat_default"]
    assert run.parent_span_id == request.span_id and run.attributes["agent.run.id"] == "run-1"
    assert run.attributes["agent.run.outcome"] == "succeeded"
    for name in ("agent.admission", "agent.window.read", "execute_tool get_current_time", "agent.settle"):
        assert first[name].parent_span_id == run.span_id, name
    chats = [s for s in receiver.spans if s.trace_id == first_trace and s.name.startswith("chat ")]
    assert len(chats) == 2 and {s.parent_span_id for s in chats} == {run.span_id}
    second = tree(receiver.spans, second_trace)
    assert second["invoke_agent chat_default"].attributes["agent.run.id"] == "run-2"
    assert {s.trace_id for s in receiver.spans} == {first_trace, second_trace}
    # AND by default not a word of the message reached the receiver
    assert not any(RECOGNISABLE.encode() in body for body in receiver.raw)
