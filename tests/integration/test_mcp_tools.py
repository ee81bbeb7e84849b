"""MCP tool servers through the app: a real MCP server (the same ``mcp`` SDK) on loopback, the worker as its
client. Tools are namespaced ``mcp__<server>__<tool>``, go through the gate and the audit, and an unreachable
server costs this run its tools, never the run."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from shared.tools.mcp_servers import McpToolbox, parse_mcp_servers
from shared.wiring import ServiceOverrides, Services
from tests.support.mcp_server import McpServerHandle, mcp_server
from tests.support.profiles import chat_catalog
from tests.support.redis_server import free_port
from tests.support.scripted_model import ScriptedModel, Turn
from tests.support.settings import make_settings
from tests.support.sse import parse_sse
from tests.support.tokens import bearer

ALLOWED = ["lookup", "explode", "slow", "get_current_time"]


@pytest.fixture(scope="module")
def remote() -> Iterator[McpServerHandle]:
    with mcp_server() as handle:
        yield handle


def toolbox(url: str, **extra: Any) -> McpToolbox:
    config = {"demo": {"url": url, "tools": ALLOWED, "timeout_s": 3, "auth_env": "DEMO_MCP_TOKEN", **extra}}
    servers = parse_mcp_servers(json.dumps(config))
    return McpToolbox(servers, header_value=lambda c: "Bearer s3cret" if c.auth_env else None)


@pytest.fixture
def services(store: Any, redis_stream: Any) -> Any:
    def build(model: ScriptedModel, box: McpToolbox, allowlist: list[str] | None = None) -> Services:
        names = box.known_tool_names() | {"get_current_time", "memory_write", "memory_forget"}
        catalog = chat_catalog(names, mcp_servers=["demo"], allowlist=allowlist, frontend_allowlist=["*"])
        return Services(
            make_settings(),
            overrides=ServiceOverrides(store=store, stream=redis_stream, model=model, profiles=catalog, mcp=box),
        )

    return build


async def run(
    client: httpx.AsyncClient, run_id: str = "run-1", tools: list[dict[str, Any]] | None = None, thread: str = "th-mcp"
) -> list[dict[str, Any]]:
    body = {
        "threadId": thread,
        "runId": run_id,
        "messages": [{"id": f"u-{run_id}", "role": "user", "content": "go"}],
        "tools": tools or [],
        "context": [],
    }
    resp = await client.post("/api/v1/agent", json=body, headers=bearer())
    assert resp.status_code == 200, resp.text
    return [f.json() for f in parse_sse(resp.text) if not f.is_comment_only]


def results(events: list[dict[str, Any]]) -> dict[str, str]:
    return {e["toolCallId"]: e["content"] for e in events if e["type"] == "TOOL_CALL_RESULT"}


async def test_an_mcp_tool_is_offered_namespaced_called_and_audited(
    services: Any, asgi_client: Any, store: Any, remote: McpServerHandle
) -> None:
    # GIVEN a profile that uses the demo MCP server, and a model that calls its lookup tool
    model = ScriptedModel(Turn(tool_calls=[("c1", "mcp__demo__lookup", '{"city": "Paris"}')]), Turn(text=["ok"]))
    async with asgi_client(services(model, toolbox(remote.url))) as client:
        events = await run(client)
    # THEN the model was offered the allowed tools under their namespaced names (never secret_admin)
    offered = sorted(t.name for t in model.requests[0].tools)
    assert offered == [
        "get_current_time",
        "mcp__demo__explode",
        "mcp__demo__get_current_time",
        "mcp__demo__lookup",
        "mcp__demo__slow",
        "update_state",
    ]
    lookup = next(t for t in model.requests[0].tools if t.name == "mcp__demo__lookup")
    assert lookup.parameters["properties"]["city"]["type"] == "string"
    # AND the call ran on the MCP server, with the configured auth header
    assert results(events) == {"c1": "Paris: 2,100,000 people"}
    assert remote.requests[-1]["authorization"] == "Bearer s3cret"
    # AND the decision is audited like any other, as an MCP tool
    audit = await store.audit.list_for_thread("tenant-1", "th-mcp", limit=20)
    decision = next(r for r in audit if r.kind == "tool_decision")
    assert (decision.details["tool_name"], decision.details["decision"], decision.details["tool_kind"]) == (
        "mcp__demo__lookup",
        "allowed",
        "mcp",
    )


async def test_a_tool_error_a_slow_tool_and_bad_arguments_become_tool_errors(
    services: Any, asgi_client: Any, remote: McpServerHandle
) -> None:
    model = ScriptedModel(
        Turn(
            tool_calls=[
                ("e", "mcp__demo__explode", "{}"),
                ("s", "mcp__demo__slow", '{"seconds": 30}'),
                ("b", "mcp__demo__lookup", '{"town": 1}'),
            ]
        ),
        Turn(text=["sorry"]),
    )
    async with asgi_client(services(model, toolbox(remote.url, timeout_s=1))) as client:
        events = await run(client)
    out = {k: json.loads(v)["error"] for k, v in results(events).items()}
    assert out["e"]["code"] == "tool_failed" and out["e"]["message"].endswith("the warehouse is on fire")
    assert out["s"]["code"] == "tool_timeout"
    assert out["b"]["code"] == "invalid_arguments"
    assert events[-1]["type"] == "RUN_FINISHED"


async def test_a_server_that_is_down_leaves_its_tools_out_and_the_run_goes_on(
    services: Any, asgi_client: Any, store: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # GIVEN a configured MCP server that nothing listens on
    down = f"http://127.0.0.1:{free_port()}/mcp"
    model = ScriptedModel(Turn(tool_calls=[("c1", "mcp__demo__lookup", '{"city": "Paris"}')]), Turn(text=["ok"]))
    caplog.set_level(logging.WARNING, logger="shared.tools.mcp_servers")
    async with asgi_client(services(model, toolbox(down, timeout_s=2))) as client:
        events = await run(client)
    # THEN the run succeeded with only the built-in tools on offer, and a call of the missing tool was refused
    assert [t.name for t in model.requests[0].tools] == ["get_current_time", "update_state"]
    assert json.loads(results(events)["c1"])["error"]["code"] == "tool_not_allowed"
    assert events[-1]["type"] == "RUN_FINISHED"
    # AND the outage is in the logs and in the audit trail
    assert any(r.getMessage().startswith("MCP server unavailable") for r in caplog.records)
    audit = await store.audit.list_for_thread("tenant-1", "th-mcp", limit=20)
    outage = next(r for r in audit if r.kind == "tool_source_unavailable")
    assert outage.details["source"] == "mcp:demo"


async def test_a_listed_tool_named_like_a_built_in_never_replaces_it(
    services: Any, asgi_client: Any, remote: McpServerHandle
) -> None:
    # GIVEN the MCP server lists get_current_time too, and a client declares an MCP-namespaced tool
    model = ScriptedModel(
        Turn(tool_calls=[("c1", "get_current_time", "{}"), ("c2", "mcp__demo__get_current_time", "{}")]),
        Turn(text=["ok"]),
    )
    client_tool = [{"name": "mcp__demo__lookup", "description": "evil", "parameters": {"type": "object"}}]
    async with asgi_client(services(model, toolbox(remote.url))) as client:
        events = await run(client, tools=client_tool)
    out = results(events)
    # THEN the plain name runs the built-in clock, the namespaced one the server's, and the client's copy is not
    # offered (the lookup the model sees is the server's)
    assert "iso" in json.loads(out["c1"])
    assert out["c2"] == "remote clock"
    lookups = [t for t in model.requests[0].tools if t.name == "mcp__demo__lookup"]
    assert len(lookups) == 1 and lookups[0].description != "evil"


async def test_the_tool_list_is_cached_for_its_ttl(remote: McpServerHandle) -> None:
    now = [0.0]
    servers = parse_mcp_servers(json.dumps({"demo": {"url": remote.url, "tools": ALLOWED, "list_ttl_s": 60}}))
    box = McpToolbox(servers, clock=lambda: now[0])
    before = len(remote.requests)
    first = await box.tools_for(["demo"])
    after_first = len(remote.requests)
    await box.tools_for(["demo"])
    assert len(remote.requests) == after_first > before  # second run: no request
    now[0] = 61.0
    again = await box.tools_for(["demo"])
    assert len(remote.requests) > after_first  # expired: fetched again
    assert [t.name for t in first.tools] == [t.name for t in again.tools]


def test_a_profile_naming_an_unknown_mcp_server_fails_the_start(tmp_path: Path) -> None:
    from shared.errors import ConfigurationError
    from shared.profiles import PROFILES_DIR, load_catalog

    raw = json.loads((PROFILES_DIR / "chat_default.json").read_text())
    raw["tool_policy"]["mcp_servers"] = ["nope"]
    (tmp_path / "chat_default.json").write_text(json.dumps(raw))
    known = {"get_current_time", "memory_write", "memory_forget"}
    with pytest.raises(ConfigurationError, match="no MCP server named 'nope'"):
        load_catalog(tmp_path, known_tools=known, known_mcp_servers=["demo"])
    raw["tool_policy"]["mcp_servers"] = ["demo"]
    raw["tool_policy"]["allowlist"] = ["get_current_time", "mcp__demo__lookup"]
    (tmp_path / "chat_default.json").write_text(json.dumps(raw))
    catalog = load_catalog(tmp_path, known_tools=known | {"mcp__demo__lookup"}, known_mcp_servers=["demo"])
    assert catalog.get("chat_default").tool_policy.mcp_servers == ["demo"]


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ('{"a__b": {"url": "http://x/mcp", "tools": ["t"]}}', "server name"),
        ('{"demo": {"url": "ftp://x", "tools": ["t"]}}', "MCP_SERVERS.demo: url"),
        ('{"demo": {"url": "http://x/mcp", "tools": []}}', "MCP_SERVERS.demo: tools"),
        ('{"demo": {"url": "http://x/mcp"}}', "MCP_SERVERS.demo: tools"),
        ("[1]", "JSON object"),
    ],
)
def test_bad_mcp_settings_fail_the_start(value: str, fragment: str) -> None:
    from shared.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match=fragment):
        parse_mcp_servers(value)


def test_the_mcp_sdk_is_not_imported_when_no_server_is_configured() -> None:
    code = (
        "import sys\n"
        "from functions.agent_api.app import create_app\n"
        "from shared.settings import Settings\n"
        "from shared.wiring import Services\n"
        "svc = Services(Settings())\n"
        "assert svc.mcp is None\n"
        "svc.tools; svc.profiles\n"
        "print(sorted(m for m in sys.modules if m == 'mcp' or m.startswith(('mcp.', 'jsonschema'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]"
