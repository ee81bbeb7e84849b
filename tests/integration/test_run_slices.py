"""Runs past one invocation (shared/runs/slices.py) through the ASGI app, on moto and a real redis-server, with a
slice set short for the test (``RUN_SLICE_S``): a run that reaches its slice's end between two steps goes on in a new
invocation, and its client sees one run (one ``RUN_STARTED``, one terminal event, ids increasing, every event once,
the text intact) with its usage counted once; the profile's ``max_run_s`` ends a run with ``run_time_limit``; and the
background-run function, a new instance with its own services, runs the next slice from the ticket it is sent."""

from __future__ import annotations

import asyncio
import json
import logging
from types import SimpleNamespace
from typing import Any

import pytest

from functions.background_run.handler import handle as function_handler
from shared.adapters.aws.queue_starter import LambdaQueueStarter
from shared.adapters.in_memory.invoker import RecordingInvoker
from shared.adapters.redis_stream import thread_stream_key
from shared.profiles import ProfileCatalog, default_catalog
from shared.wiring import ServiceOverrides, Services
from tests.support.chat_requests import TIME_CALL, post_run, run_body, user
from tests.support.scripted_model import ScriptedModel, Turn
from tests.support.settings import make_settings
from tests.support.tokens import bearer

SHORT_SLICE = {"run_slice_s": 0.01}
LIMITS = json.dumps({"user": {"concurrentRuns": 1, "tokensPerDay": 1_000_000}})


def two_turns() -> ScriptedModel:
    return ScriptedModel(
        Turn(tool_calls=[TIME_CALL], input_tokens=11, output_tokens=3),
        Turn(text=["It is ", "noon ", "in Paris."], input_tokens=17, output_tokens=6),
    )


def sliced(caplog: pytest.LogCaptureFixture) -> list[int]:
    return [r.slice for r in caplog.records if r.getMessage() == "run goes on in a new invocation"]  # type: ignore[attr-defined]


async def test_a_run_continued_across_two_slices_is_one_run_to_its_client_with_usage_counted_once(
    make_services: Any, asgi_client: Any, redis_stream: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="shared.runs.execution")
    # GIVEN a slice that ends right after the first step, limits that count usage, and a model that calls a tool
    model = two_turns()
    model.turns.append(Turn(text=["You are welcome."]))
    services = make_services(model, limits=LIMITS, **SHORT_SLICE)
    async with asgi_client(services) as client:
        # WHEN the run is posted and followed on its response
        status, frames = await post_run(client, run_body("th-sl", "run-sl", [user("m1", "time in Paris?")]))
        doc = (await client.get("/api/v1/agent/runs/run-sl", headers=bearer())).json()
        usage = (await client.get("/api/v1/usage", headers=bearer())).json()
        # AND a second run is admitted afterwards (the run's one concurrency slot was given back)
        again, after = await post_run(client, run_body("th-sl", "run-sl-2", [user("m2", "thanks")]))
        await services.queue_starter.wait_idle()
    events = [f.json() for f in frames]
    types = [e["type"] for e in events]
    # THEN it went on in a second slice
    assert sliced(caplog) == [1]
    # AND its client saw one run: one RUN_STARTED, one terminal event, last; every id once, increasing
    assert status == 200 and types.count("RUN_STARTED") == 1 and types[0] == "RUN_STARTED"
    assert types[-1] == "RUN_FINISHED" and types.count("RUN_FINISHED") == 1 and "RUN_ERROR" not in types
    ids = [f.id for f in frames]
    assert len(set(ids)) == len(ids) and ids == sorted(ids, key=lambda i: tuple(map(int, i.split("-"))))
    stream = await redis_stream.read_after(thread_stream_key("tenant-1", "th-sl"), "0-0", block_ms=0, count=1000)
    mine = [e.id for e in stream if e.event.get("metadata", {}).get("runId") == "run-sl"]
    assert ids == mine  # nothing missing, nothing twice: exactly the run's events on the thread's stream
    # AND the text is intact, answering the tool result the first slice stored
    assert "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT") == "It is noon in Paris."
    assert [m.role for m in model.requests[1].messages[-3:]] == ["user", "assistant", "tool"]
    # AND the usage of both slices is counted once: on RUN_FINISHED, in the ledger, and against the limits
    assert (events[-1]["usage"][0]["inputTokens"], events[-1]["usage"][0]["outputTokens"]) == (28, 9)
    assert doc["status"] == "succeeded" and doc["usage"] == events[-1]["usage"]
    assert (usage["day"]["totalTokens"], usage["day"]["runs"], usage["counted"]["activeRuns"]) == (37, {"worker": 1}, 0)
    assert again == 200 and after[-1].json()["type"] == "RUN_FINISHED"


async def test_a_run_past_its_profiles_longest_time_ends_with_run_time_limit(
    store: Any, redis_stream: Any, asgi_client: Any
) -> None:
    # GIVEN a profile that allows a run a tenth of a second in all, and a first step that takes longer
    catalog = default_catalog()
    profiles = {p.name: p for p in catalog}
    chat = profiles["chat_default"]
    profiles["chat_default"] = chat.model_copy(
        update={"run_policy": chat.run_policy.model_copy(update={"max_run_s": 0.1})}
    )
    model = ScriptedModel(Turn(tool_calls=[TIME_CALL], delay_s=0.3))
    services = Services(
        make_settings(),
        overrides=ServiceOverrides(store=store, stream=redis_stream, model=model, profiles=ProfileCatalog(profiles)),
    )
    async with asgi_client(services) as client:
        _status, frames = await post_run(client, run_body("th-tl", "run-tl", [user("m1", "time?")]))
        doc = (await client.get("/api/v1/agent/runs/run-tl", headers=bearer())).json()
    last = frames[-1].json()
    # THEN the run ends before its next model turn, with the documented code, and its status says so
    assert (last["type"], last["code"]) == ("RUN_ERROR", "run_time_limit")
    assert doc["status"] == "failed" and doc["error"]["code"] == "run_time_limit"
    assert len(model.requests) == 1


async def test_the_background_run_function_runs_the_next_slice_in_a_new_instance(
    store: Any, redis_stream: Any, asgi_client: Any
) -> None:
    # GIVEN the API, whose runs go on through the Lambda starter (its invocations recorded), and a second
    # instance of the function with services of its own on the same table and stream
    invoker = RecordingInvoker()
    model = two_turns()

    def instance(**overrides: Any) -> Services:
        return Services(
            make_settings(**SHORT_SLICE),
            overrides=ServiceOverrides(store=store, stream=redis_stream, model=model, **overrides),
        )

    api = instance(queue_starter=LambdaQueueStarter(invoker, "bg-fn"))
    function = instance(queue_starter=LambdaQueueStarter(RecordingInvoker(), "bg-fn"))
    async with asgi_client(api) as client:
        posted = asyncio.create_task(post_run(client, run_body("th-fn", "run-fn", [user("m1", "time?")])))
        # WHEN the first slice ends and the function receives the ticket it was sent
        for _ in range(500):
            if invoker.invocations:
                break
            await asyncio.sleep(0.01)
        ((name, event),) = invoker.invocations
        outcome = await function_handler(event, SimpleNamespace(), function)
        status, frames = await posted
    assert status == 200
    events = [f.json() for f in frames]
    # THEN the next slice ran there, and the client of the first instance saw the whole run, once
    assert name == "bg-fn" and event["continue"]["slice_index"] == 1 and event["continue"]["run_id"] == "run-fn"
    assert outcome == {"threadId": "th-fn", "drained": True, "runs": {}}
    assert [e["type"] for e in events].count("RUN_STARTED") == 1 and events[-1]["type"] == "RUN_FINISHED"
    assert "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT") == "It is noon in Paris."
    assert (events[-1]["usage"][0]["inputTokens"], events[-1]["usage"][0]["outputTokens"]) == (28, 9)
