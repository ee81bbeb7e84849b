"""Nothing is killed by the platform's timeout: a run ends itself with ``RUN_ERROR`` ``run_deadline`` before its
invocation's deadline, and a thread's event stream closes cleanly before it (the client resumes with its last id).

The deadline comes from the Lambda Web Adapter's ``x-amzn-lambda-context`` header (``deadline``, epoch ms), from a
handler's Lambda context, or, without either, from the configured function timeout.
"""

from __future__ import annotations

import json
import time
from types import SimpleNamespace
from typing import Any

import httpx

from shared.models import Identity, RunStatus
from shared.runs.deadline import LAMBDA_CONTEXT_HEADER, deadline_from_context, deadline_from_lambda_header
from shared.wiring import ServiceOverrides, Services
from tests.support.live_app import serve_app
from tests.support.scripted_model import ScriptedModel, Turn
from tests.support.settings import make_settings
from tests.support.sse import parse_sse
from tests.support.streams import assert_well_formed_run, body, events_of
from tests.support.tokens import bearer

USER = Identity(tenant_id="tenant-1", user_id="user-1")


def services_on(store: Any, redis_url: str, model: ScriptedModel, **settings: Any) -> Services:
    """Services whose Redis client is created lazily, on the served app's own event loop."""
    return Services(
        make_settings(redis_url=redis_url, **settings), overrides=ServiceOverrides(store=store, model=model)
    )


def lambda_context_header(seconds_left: float) -> dict[str, str]:
    deadline_ms = int((time.time() + seconds_left) * 1000)
    return {LAMBDA_CONTEXT_HEADER: json.dumps({"request_id": "r", "deadline": deadline_ms})}


def test_the_deadline_is_read_from_the_web_adapter_header_and_from_a_handler_context() -> None:
    assert deadline_from_lambda_header(json.dumps({"deadline": 1_700_000_000_500})) == 1_700_000_000.5
    assert deadline_from_lambda_header(json.dumps({"deadline_ms": 1_700_000_000_000})) == 1_700_000_000.0
    for junk in (None, "", "not json", "[]", json.dumps({"deadline": "soon"}), json.dumps({"deadline": True})):
        assert deadline_from_lambda_header(junk) is None
    context = SimpleNamespace(get_remaining_time_in_millis=lambda: 3000)
    got = deadline_from_context(context)
    assert got is not None and abs(got - (time.time() + 3)) < 1
    assert deadline_from_context(object()) is None


async def test_a_run_that_would_outlive_its_invocation_ends_with_run_deadline_before_it(
    store: Any, redis_url: str
) -> None:
    # GIVEN a model that talks for 20 s, and an invocation with 8 s left (the run keeps a 5 s margin)
    model = ScriptedModel(Turn(text=[f"w{i} " for i in range(100)], delay_s=0.2))
    services = services_on(store, redis_url, model, run_deadline_margin_s=5.0, stream_deadline_margin_s=0.5)
    with serve_app(services) as url:
        async with httpx.AsyncClient(timeout=30) as client:
            started = time.monotonic()
            resp = await client.post(
                f"{url}/api/v1/agent",
                json=body("th-late", "run-late"),
                headers={**bearer(), **lambda_context_header(8.0)},
            )
            took = time.monotonic() - started
            history = await client.get(f"{url}/api/v1/threads/th-late/history", headers=bearer())
    # THEN the response ends with one RUN_ERROR run_deadline, before the invocation's deadline
    terminal = assert_well_formed_run(events_of(resp.text))
    assert (terminal["type"], terminal["code"]) == ("RUN_ERROR", "run_deadline")
    assert took < 8.0
    # AND the run is recorded failed with that code, the thread free, the partial answer kept
    run = await store.runs.get_run("tenant-1", "run-late")
    assert run is not None and (run.status, run.error_code) == (RunStatus.FAILED, "run_deadline")
    assert (await store.threads.get_thread(USER, "th-late")).active_run_id is None
    items = history.json()["items"]
    assert items[-1]["role"] == "assistant" and items[-1].get("partial") is True


async def test_the_thread_event_stream_closes_cleanly_before_the_invocation_deadline(
    store: Any, redis_url: str
) -> None:
    # GIVEN a thread with one finished run, and a follower of its event stream whose invocation has 2 s left
    services = services_on(store, redis_url, ScriptedModel(Turn(text=["hi"])), stream_deadline_margin_s=1.0)
    with serve_app(services) as url:
        async with httpx.AsyncClient(timeout=30) as client:
            await client.post(f"{url}/api/v1/agent", json=body("th-follow", "run-1"), headers=bearer())
            started = time.monotonic()
            resp = await client.get(
                f"{url}/api/v1/threads/th-follow/events", headers={**bearer(), **lambda_context_header(2.0)}
            )
            took = time.monotonic() - started
            # WHEN the client resumes from the last id it got
            last_id = [f.id for f in parse_sse(resp.text) if f.id][-1]
            resumed = await client.get(
                f"{url}/api/v1/threads/th-follow/events",
                headers={**bearer(), "Last-Event-ID": last_id, **lambda_context_header(1.5)},
            )
    # THEN the stream ended by itself before the deadline, complete frames only, with the run's events
    assert resp.status_code == 200 and 0.5 < took < 2.0
    assert [e["type"] for e in events_of(resp.text)][-1] == "RUN_FINISHED"
    # AND resuming starts after the last event (nothing repeated)
    assert resumed.status_code == 200 and events_of(resumed.text) == []
