"""Limits as Lambda runs them: the streaming function started by ``run.sh`` (uvicorn), configured through the
environment only (``LIMITS`` included), on a moto server and a real redis-server, calling the scripted model
server over HTTP with the real ``openai`` client.

- 64 concurrent requests of one user with ``concurrentRuns: 2``: the model never serves more than two at once, the
  others are ``429 too_many_runs`` with ``Retry-After``, and nothing of theirs is stored.
- A token budget under 64 concurrent requests: the tokens counted never exceed the budget (each run reserves its
  profile's window and output caps; a run of one model call uses less); a run of several calls crosses it
  mid-stream, finishes, and the next is refused; the overshoot is what it used beyond its reservation.
- An instance frozen (``SIGSTOP``) mid-run holds a slot: the slot is free once the run's lease has expired.
- A malformed ``LIMITS`` stops the instance at start with an error naming it.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from shared.adapters.aws.dynamodb_store import DynamoDBStore
from shared.auth import mint_local_token
from shared.errors import NotFound
from shared.limits.gate import DEFAULT_OUTPUT_ESTIMATE
from shared.models import Identity, RunStatus
from shared.profiles import default_catalog
from tests.support.counting_model import CountingModelServer
from tests.support.lambda_instance import Instance, function_env, started
from tests.support.model_server import ScriptedToolCall, ScriptedTurn
from tests.support.sse import iter_sse_frames, parse_sse

from .leases import LEASE_S, LEASED

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.serial]

SECRET = "test-secret-for-hs256-tokens-0123456789"  # the secret the shared fixtures sign with
TABLE, REGION = "agent-test", "us-east-1"
USER = Identity(tenant_id="tenant-1", user_id="user-1")
CHAT = default_catalog().get("chat_default")
ESTIMATE = CHAT.history_policy.max_input_tokens + (CHAT.model.max_output_tokens or DEFAULT_OUTPUT_ESTIMATE)


def bearer(user: str = "user-1", tenant: str = "tenant-1", scopes: tuple[str, ...] = ()) -> dict[str, str]:
    token = mint_local_token(SECRET, user_id=user, tenant_id=tenant, scopes=scopes)
    return {"Authorization": f"Bearer {token}"}


def body(thread: str, run: str, text: str = "hello") -> dict[str, Any]:
    return {"threadId": thread, "runId": run, "messages": [{"id": f"m-{run}", "role": "user", "content": text}]}


@pytest.fixture
def model() -> Iterator[CountingModelServer]:
    with CountingModelServer() as server:
        yield server


def environment(dynamodb_url: str, redis_url: str, model: CountingModelServer, limits: str) -> dict[str, str]:
    return {
        **function_env(dynamodb_url, redis_url, model.base_url, table=TABLE, secret=SECRET),
        **LEASED,
        "LIMITS": limits,
    }


async def post(client: httpx.AsyncClient, url: str, payload: dict[str, Any], **kw: Any) -> httpx.Response:
    return await client.post(f"{url}/api/v1/agent", json=payload, headers=bearer(**kw))


async def nothing_stored(store: DynamoDBStore, thread_id: str, run_id: str) -> bool:
    if await store.runs.get_run(USER.tenant_id, run_id) is not None:
        return False
    try:
        await store.threads.get_thread(USER, thread_id)
    except NotFound:
        return True
    return False


async def test_64_concurrent_requests_with_two_slots_reach_the_model_two_at_a_time(
    dynamodb_url: str, redis_url: str, model: CountingModelServer, shared_store: DynamoDBStore, tmp_path: Path
) -> None:
    # GIVEN a user limited to 2 concurrent runs, and a model that takes about a second per answer
    model.responder = lambda _body: ScriptedTurn(text=["slow ", "and ", "steady"], chunk_delay_s=0.4)
    env = environment(dynamodb_url, redis_url, model, json.dumps({"user": {"concurrentRuns": 2}}))
    with started(env, tmp_path, ["a"]) as (a,):
        async with httpx.AsyncClient(timeout=120) as client:
            # WHEN 64 requests of that user arrive at once, each on its own thread
            responses = await asyncio.gather(*(post(client, a.url, body(f"th-{i}", f"run-{i}")) for i in range(64)))
            usage = (await client.get(f"{a.url}/api/v1/usage", headers=bearer())).json()
    ok = [i for i, r in enumerate(responses) if r.status_code == 200]
    refused = [i for i, r in enumerate(responses) if r.status_code != 200]
    # THEN the model never served more than 2 at once, and served only the admitted runs
    assert model.max_in_flight <= 2, model.max_in_flight
    assert 2 <= len(ok) < 64 and len(model.requests) == len(ok)
    for i in ok:
        events = [f.json() for f in parse_sse(responses[i].text) if f.data is not None]
        assert events[-1]["type"] == "RUN_FINISHED"
    # AND every other request is a 429 too_many_runs with a Retry-After, and nothing of it is stored
    for i in refused:
        response = responses[i]
        assert response.status_code == 429, response.text
        error = response.json()["error"]
        assert error["code"] == "too_many_runs" and error["details"]["kind"] == "concurrentRuns"
        assert response.headers["retry-after"] == "5"
        assert await nothing_stored(shared_store, f"th-{i}", f"run-{i}")
    # AND once the runs ended, no slot is held and the usage counts exactly the admitted runs
    assert usage["counted"]["activeRuns"] == 0
    assert usage["day"]["runs"] == {"worker": len(ok)}


async def test_a_token_budget_holds_under_64_concurrent_requests_and_a_crossing_run_finishes(
    dynamodb_url: str, redis_url: str, model: CountingModelServer, tmp_path: Path
) -> None:
    # GIVEN a daily budget just under four reservations, and runs that use 24,000 tokens in one model call (less
    # than their reservation: the profile's window cap plus its output cap)
    budget = 4 * ESTIMATE - 1_000
    model.responder = lambda _body: ScriptedTurn(text=["ok"], usage=(20_000, 4_000), chunk_delay_s=0.2)
    env = environment(dynamodb_url, redis_url, model, json.dumps({"user": {"tokensPerDay": budget}}))
    with started(env, tmp_path, ["a"]) as (a,):
        async with httpx.AsyncClient(timeout=120) as client:
            # WHEN 64 requests arrive at once
            burst = await asyncio.gather(*(post(client, a.url, body(f"th-{i}", f"run-{i}")) for i in range(64)))
            admitted = sum(r.status_code == 200 for r in burst)
            # THEN only the reservations that fit were admitted; every other request is a 429 quota_exceeded
            assert admitted == 3, [r.status_code for r in burst]
            for response in burst:
                if response.status_code != 200:
                    error = response.json()["error"]
                    assert response.status_code == 429 and error["code"] == "quota_exceeded"
                    assert error["details"]["kind"] == "tokensPerDay" and error["details"]["scope"] == "user"
                    assert int(response.headers["retry-after"]) >= 1 and error["details"]["resetAt"].endswith("Z")
            used = (await client.get(f"{a.url}/api/v1/usage", headers=bearer())).json()["counted"]["tokensToday"]
            # AND the tokens counted are what the three runs used: within the budget
            assert used == 3 * 24_000 <= budget
            # WHEN the next run fits its reservation but calls the model twice (a tool), crossing the budget
            model.responder = lambda _body: ScriptedTurn(text=["ok"], usage=(20_000, 4_000))
            clock_call = ScriptedToolCall(name="get_current_time", arguments="{}", id="c1")
            model.enqueue(ScriptedTurn(tool_calls=[clock_call], usage=(20_000, 4_000)))
            crossing = await post(client, a.url, body("th-x", "run-x"))
            after = (await client.get(f"{a.url}/api/v1/usage", headers=bearer())).json()["counted"]["tokensToday"]
            refused = await post(client, a.url, body("th-y", "run-y"))
    # THEN it finishes (the answer in flight is never cut) and the next one is refused
    assert crossing.status_code == 200
    assert [f.json() for f in parse_sse(crossing.text) if f.data is not None][-1]["type"] == "RUN_FINISHED"
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "quota_exceeded"
    # AND the overshoot is bounded by what that run used beyond its reservation
    assert budget < after == used + 48_000 <= budget + (48_000 - ESTIMATE)


async def test_a_slot_held_by_a_frozen_instance_is_free_once_the_lease_expires(
    dynamodb_url: str, redis_url: str, model: CountingModelServer, shared_store: DynamoDBStore, tmp_path: Path
) -> None:
    # GIVEN one slot per user and a slow run on instance A
    model.responder = lambda _body: ScriptedTurn(text=["quick"])
    model.enqueue(ScriptedTurn(text=[f"{i} " for i in range(40)], chunk_delay_s=0.3))
    env = environment(dynamodb_url, redis_url, model, json.dumps({"user": {"concurrentRuns": 1}}))
    with started(env, tmp_path) as (a, b):
        async with httpx.AsyncClient(timeout=60) as client:
            first_run = body("th-1", "run-1")
            async with client.stream("POST", f"{a.url}/api/v1/agent", json=first_run, headers=bearer()) as r:
                async for frame in iter_sse_frames(r, strict_eof=False):
                    if frame.data is not None and frame.json()["type"] == "TEXT_MESSAGE_CONTENT":
                        break
                # WHEN A is frozen mid-run (its heartbeat stops; its slot is still held)
                a.freeze()
            frozen_at = time.monotonic()
            first = await post(client, b.url, body("th-2", "run-2"))
            assert first.status_code == 429 and first.json()["error"]["code"] == "too_many_runs"
            # THEN a request through B is admitted once the frozen run's lease has expired (429 until then)
            statuses: list[int] = []
            while True:
                response = await post(client, b.url, body("th-2", "run-2"))
                statuses.append(response.status_code)
                waited = time.monotonic() - frozen_at
                if response.status_code != 429 or waited > LEASE_S + 10:
                    break
                await asyncio.sleep(0.5)
    assert response.status_code == 200, (statuses, response.text)
    assert LEASE_S - 1 <= waited <= LEASE_S + 10, (statuses, waited)
    # AND the frozen run was ended as a takeover or the sweeper ends it
    old = await shared_store.runs.get_run(USER.tenant_id, "run-1")
    assert old is not None and old.status is RunStatus.FAILED


def test_a_malformed_limits_setting_stops_the_instance_at_start_naming_it(
    dynamodb_url: str, redis_url: str, model: CountingModelServer, tmp_path: Path
) -> None:
    env = environment(dynamodb_url, redis_url, model, '{"user": {"concurrentRuns": 0}}')
    instance = Instance("bad", env, tmp_path)
    try:
        with pytest.raises(RuntimeError, match="exited"):
            instance.wait_ready(timeout_s=60)
    finally:
        instance.stop()
    log = (tmp_path / "instance-bad.log").read_text()
    assert "LIMITS is not valid: user.concurrentRuns" in log
