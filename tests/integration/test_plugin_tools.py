"""A plugin tool through the app: registered from TOOL_PLUGINS, allowed by the profile, arguments checked before
its handler runs, answered like every server tool."""

from __future__ import annotations

import json
from typing import Any

from shared.wiring import ServiceOverrides, Services
from tests.support.profiles import chat_catalog
from tests.support.scripted_model import ScriptedModel, Turn
from tests.support.settings import make_settings
from tests.support.sse import parse_sse
from tests.support.tokens import bearer


async def test_a_plugin_tool_is_offered_checked_and_run_by_the_worker(
    store: Any, redis_stream: Any, asgi_client: Any
) -> None:
    # GIVEN units_convert registered from TOOL_PLUGINS and allowed by the chat profile
    settings = make_settings(tool_plugins="tool_plugins.units_convert:TOOL")
    probe = Services(settings)
    catalog = chat_catalog(
        probe.tools.names | {"memory_write", "memory_forget"}, allowlist=["get_current_time", "units_convert"]
    )
    model = ScriptedModel(
        Turn(
            tool_calls=[
                ("bad", "units_convert", '{"value": 1, "from_unit": "km", "to_unit": "lightyear"}'),
                ("good", "units_convert", '{"value": 3, "from_unit": "km", "to_unit": "m"}'),
            ]
        ),
        Turn(text=["3 km is 3000 m."]),
    )
    services = Services(
        settings, overrides=ServiceOverrides(store=store, stream=redis_stream, model=model, profiles=catalog)
    )
    body = {"threadId": "th-plug", "runId": "r1", "messages": [{"id": "u1", "role": "user", "content": "3 km in m?"}]}
    async with asgi_client(services) as client:
        resp = await client.post("/api/v1/agent", json=body, headers=bearer())
    events = [f.json() for f in parse_sse(resp.text) if not f.is_comment_only]
    # THEN the model was offered the plugin tool with its strict schema
    offered = {t.name: t for t in model.requests[0].tools}
    assert offered["units_convert"].parameters["additionalProperties"] is False
    # AND the bad call was refused by the schema check, the good one answered by the handler
    results = {e["toolCallId"]: json.loads(e["content"]) for e in events if e["type"] == "TOOL_CALL_RESULT"}
    assert results["bad"]["error"]["code"] == "invalid_arguments"
    assert results["good"]["result"] == 3000.0
    assert events[-1]["type"] == "RUN_FINISHED"
