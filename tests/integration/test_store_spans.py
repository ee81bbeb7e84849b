"""Where a run's time goes: with traces on, its DynamoDB calls (moto, through the process's one client) and its
Redis calls (a real redis-server) are client spans under the run's spans; with traces off, nothing of it is
imported, registered or wrapped (shared/tracing/store_spans.py)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from shared.models import Identity
from shared.wiring import ServiceOverrides, Services
from tests.support.scripted_model import ScriptedModel, Turn
from tests.support.settings import TABLE, make_settings
from tests.support.tokens import bearer
from tests.support.traces import in_memory_traces

USER = Identity(tenant_id="tenant-1", user_id="user-1")


def ancestors(span: ReadableSpan, spans: list[ReadableSpan]) -> list[str]:
    """The names of ``span``'s parents, nearest first."""
    by_id = {s.context.span_id: s for s in spans}
    names: list[str] = []
    parent = span.parent
    while parent is not None and parent.span_id in by_id:
        found = by_id[parent.span_id]
        names.append(found.name)
        parent = found.parent
    return names


async def test_a_runs_dynamodb_and_redis_calls_are_client_spans_under_the_run(
    aws: Any, redis_url: str, asgi_client: Any
) -> None:
    # GIVEN traces on (exported to memory) before the services are built, on DynamoDB (moto) and Redis
    with in_memory_traces() as exported:
        services = Services(
            make_settings(redis_url=redis_url), overrides=ServiceOverrides(model=ScriptedModel(Turn(text=["hi"])))
        )
        body = {"threadId": "th", "runId": "run-1", "messages": [{"id": "m1", "role": "user", "content": "hello"}]}
        # WHEN a chat run goes through the app
        async with asgi_client(services) as client:
            response = await client.post("/api/v1/agent", json=body, headers=bearer())
            await services.runs.wait_idle()
        spans = list(exported.get_finished_spans())
    assert "RUN_FINISHED" in response.text
    dynamodb = [s for s in spans if s.attributes and s.attributes.get("db.system.name") == "aws.dynamodb"]
    redis = [s for s in spans if s.attributes and s.attributes.get("db.system.name") == "redis"]
    # THEN the admission's DynamoDB calls are client spans under the admission, under the run
    in_claim = [s for s in dynamodb if "agent.admission.claim" in ancestors(s, spans)]
    claim = next(s for s in in_claim if s.name == f"UpdateItem {TABLE}")
    assert ancestors(claim, spans)[:3] == ["agent.admission.claim", "agent.admission", "invoke_agent chat_default"]
    assert claim.kind.name == "CLIENT" and claim.attributes is not None
    assert claim.attributes["rpc.method"] == "UpdateItem" and tuple(claim.attributes["aws.dynamodb.table_names"]) == (
        TABLE,
    )
    transaction = next(s for s in dynamodb if s.name == f"TransactWriteItems {TABLE}")
    assert "agent.admission.store" in ancestors(transaction, spans)
    # AND the settlement's calls (the ledger, the release) are under the run's settle span
    assert any("agent.settle" in ancestors(s, spans) for s in dynamodb)
    # AND the run's events are XADD spans under the run, the admission's probe a PING span
    xadds = [s for s in redis if s.name == "XADD"]
    assert xadds and all("invoke_agent chat_default" in ancestors(s, spans) for s in xadds)
    assert any(s.name == "PING" and "agent.admission.claim" in ancestors(s, spans) for s in redis)
    # AND no span carries a key or an item
    for span in dynamodb + redis:
        assert not any("th" == str(v) or "tenant-1" in str(v) for v in (span.attributes or {}).values()), span.name


def test_with_traces_off_nothing_of_the_store_spans_is_imported_registered_or_wrapped() -> None:
    # a fresh process as a function starts: settings without an OTLP endpoint, the warm-up, the run service
    code = (
        "import sys\n"
        "from shared.wiring import Services\n"
        "from shared.settings import Settings\n"
        "s = Services(Settings(jwt_secret='x'*32, auth_mode='hs256', aws_region='us-east-1',"
        " redis_url='redis://127.0.0.1:9'))\n"
        "s.warm_up()\n"
        "hooks = s.dynamodb_client.meta.events._emitter._handlers.prefix_search('after-call.dynamodb.GetItem')\n"
        "print('shared.tracing.store_spans' in sys.modules, type(s.runs._stream).__name__,"
        " sum('store_spans' in getattr(h, '__module__', '') for h in hooks))\n"
    )
    env = {"PATH": "/usr/bin:/bin", "AWS_DEFAULT_REGION": "us-east-1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.split() == ["False", "RedisEventStream", "0"]
