"""The function dies mid-run (Lambda timeout, out of memory): the sweeper ends the run and repairs the thread.

A dead process leaves a run ``running`` with a heartbeat that stopped, a busy thread, a stream without a terminal
event, and a tool call without a result. The state is written here exactly as ``RunService`` and the worker leave
it at that moment; then the sweeper runs, and the next run on the thread goes through the real ``openai`` client
against the model server.
"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

import httpx
import pytest
from redis.asyncio import Redis

from functions.agent_api import sweeper_handler
from shared.adapters.aws.dynamodb_store import DynamoDBStore
from shared.adapters.redis_stream import RedisEventStream
from shared.models import RunStatus
from shared.runs.sweeper import RunSweeper
from shared.wiring import ServiceOverrides, Services
from tests.support.agui_clients import validate_sse
from tests.support.dead_runs import USER, DeadRun, leave_a_dead_run
from tests.support.model_server import ModelServer, ScriptedTurn
from tests.support.settings import make_settings
from tests.support.streams import assert_well_formed_run, body, events_of, history
from tests.support.tokens import bearer

pytestmark = pytest.mark.e2e


async def test_a_run_whose_process_died_during_a_tool_call_is_ended_and_the_thread_works_again(
    live: str, store: DynamoDBStore, redis_stream: RedisEventStream, model_server: ModelServer
) -> None:
    dead = DeadRun("th-dead", "run-dead")
    await leave_a_dead_run(store, redis_stream, dead, died_while="tool")
    async with httpx.AsyncClient(base_url=live, timeout=30) as client:
        # GIVEN the thread is still held by the dead run
        assert (await store.threads.get_thread(USER, "th-dead")).active_run_id == "run-dead"
        # WHEN the sweeper runs (before any next message would take the thread over)
        report = await RunSweeper(store.threads, store.runs, store.audit, redis_stream).sweep()
        # THEN it ended exactly that run, as failed with run_failed
        assert (report.ended, report.repaired_tool_calls) == (["run-dead"], 1)
        run = await store.runs.get_run("tenant-1", "run-dead")
        assert run is not None and (run.status, run.error_code) == (RunStatus.FAILED, "run_failed")
        # AND its stream now ends with exactly one RUN_ERROR, every call answered and the step closed
        replay = await client.get("/api/v1/agent/runs/run-dead/events", headers=bearer())
        events = events_of(replay.text)
        terminal = assert_well_formed_run(events)
        assert (terminal["type"], terminal["code"]) == ("RUN_ERROR", "run_failed")
        result = next(e for e in events if e["type"] == "TOOL_CALL_RESULT")
        assert result["toolCallId"] == "call-stuck"
        assert json.loads(result["content"])["error"]["code"] == "run_failed"
        assert validate_sse(replay.text).clean
        # AND the synthetic result is stored, once, with the id the stream shows
        items = await history(client, "th-dead")
        assert [(i["role"], i.get("toolCallId")) for i in items] == [
            ("user", None),
            ("assistant", None),
            ("tool", "call-stuck"),
        ]
        assert items[-1]["id"] == result["messageId"]
        # AND the repair is audited
        audit = await client.get("/api/v1/threads/th-dead/audit", headers=bearer(scopes=("agent:audit",)))
        swept = [d for d in audit.json()["decisions"] if d["kind"] == "run_swept"]
        assert [d["details"]["synthetic_results_for"] for d in swept] == [["call-stuck"]]
        # AND a second sweep (a schedule firing twice) changes nothing
        again = await RunSweeper(store.threads, store.runs, store.audit, redis_stream).sweep()
        assert again.ended == [] and len(await history(client, "th-dead")) == 3
        # WHEN the user sends the next message
        model_server.enqueue(ScriptedTurn(text=["Sorry, that took too long."]))
        nxt = await client.post("/api/v1/agent", json=body("th-dead", "run-next", "hello?", "u-2"), headers=bearer())
    # THEN it runs through the real openai client, and the model got a valid, paired context
    assert assert_well_formed_run(events_of(nxt.text))["type"] == "RUN_FINISHED"
    sent = [m for m in model_server.requests[-1]["messages"] if m["role"] != "system"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "user"]
    assert sent[1]["tool_calls"][0]["id"] == "call-stuck" and sent[2]["tool_call_id"] == "call-stuck"


async def test_text_streamed_but_not_stored_by_a_dead_run_is_kept_marked_partial(
    live: str, store: DynamoDBStore, redis_stream: RedisEventStream, model_server: ModelServer
) -> None:
    # GIVEN a run that died while streaming its answer (the text is on the stream only)
    await leave_a_dead_run(store, redis_stream, DeadRun("th-mute", "run-mute"), died_while="text")
    # WHEN the sweeper runs
    report = await RunSweeper(store.threads, store.runs, store.audit, redis_stream).sweep()
    async with httpx.AsyncClient(base_url=live, timeout=30) as client:
        items = await history(client, "th-mute")
        replay = await client.get("/api/v1/agent/runs/run-mute/events", headers=bearer())
        model_server.enqueue(ScriptedTurn(text=["It is noon."]))
        nxt = await client.post("/api/v1/agent", json=body("th-mute", "run-mute-2", "well?", "u-2"), headers=bearer())
    # THEN the text is stored once, marked partial, with the id the stream used
    assert report.salvaged_messages == 1
    assert [(i["id"], i["content"], i.get("partial")) for i in items] == [
        ("u-1", "what time is it?", None),
        ("msg-a1", "Checking the clock", True),
    ]
    # AND the stream closes the open message and ends with one RUN_ERROR
    events = events_of(replay.text)
    assert assert_well_formed_run(events)["code"] == "run_failed"
    assert validate_sse(replay.text).clean
    # AND the next run works
    assert assert_well_formed_run(events_of(nxt.text))["type"] == "RUN_FINISHED"


async def test_the_sweeper_leaves_live_runs_alone(store: DynamoDBStore, redis_stream: RedisEventStream) -> None:
    # GIVEN a run that died long ago and one whose process is alive (it beat a moment ago)
    await leave_a_dead_run(store, redis_stream, DeadRun("th-old", "run-old"), died_while="tool")
    await leave_a_dead_run(store, redis_stream, DeadRun("th-new", "run-new"), died_while="tool", minutes_ago=30)
    await store.runs.heartbeat("tenant-1", "run-new", last_stream_id=None)
    # WHEN the sweeper runs
    sweeper = RunSweeper(store.threads, store.runs, store.audit, redis_stream, stale_after=timedelta(minutes=5))
    report = await sweeper.sweep()
    # THEN only the dead run is ended; the live one and its thread are untouched
    assert report.ended == ["run-old"]
    live_run = await store.runs.get_run("tenant-1", "run-new")
    assert live_run is not None and live_run.status is RunStatus.RUNNING
    assert (await store.threads.get_thread(USER, "th-new")).active_run_id == "run-new"
    assert (await store.threads.get_thread(USER, "th-old")).active_run_id is None


async def test_runs_killed_by_a_timeout_count_as_run_errors(
    store: DynamoDBStore,
    redis_stream: RedisEventStream,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run killed by Lambda (timeout, out of memory) never emits its own RunErrors; the sweeper that ends it does."""
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "agent-backend-test")
    # GIVEN two runs whose processes died, and one that is alive
    await leave_a_dead_run(store, redis_stream, DeadRun("th-k1", "run-k1"), died_while="tool")
    await leave_a_dead_run(store, redis_stream, DeadRun("th-k2", "run-k2"), died_while="text")
    await leave_a_dead_run(store, redis_stream, DeadRun("th-ok", "run-ok"), died_while="tool", minutes_ago=30)
    await store.runs.heartbeat("tenant-1", "run-ok", last_stream_id=None)
    capsys.readouterr()
    # WHEN the sweeper ends the dead ones, and a second sweep finds nothing
    await RunSweeper(store.threads, store.runs, store.audit, redis_stream, stale_after=timedelta(minutes=5)).sweep()
    await RunSweeper(store.threads, store.runs, store.audit, redis_stream, stale_after=timedelta(minutes=5)).sweep()
    # THEN one EMF document counts both in RunErrors (the alarm's metric and dimension) and RunsSwept; no more
    docs = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith('{"_aws"')]
    assert len(docs) == 1
    (directive,) = docs[0]["_aws"]["CloudWatchMetrics"]
    assert (directive["Namespace"], directive["Dimensions"]) == ("AgentBackend", [["service"]])
    assert docs[0]["service"] == "agent-backend-test"
    assert (docs[0]["RunErrors"], docs[0]["RunsSwept"]) in [(2.0, 2.0), ([2.0], [2.0])]


def test_the_lambda_entry_point_sweeps_with_the_container_services(store: DynamoDBStore, redis_url: str) -> None:
    # GIVEN a dead run, and the sweeper's Lambda entry point with its own Redis client
    services = Services(make_settings(redis_url=redis_url), overrides=ServiceOverrides(store=store))
    setup_stream = RedisEventStream(Redis.from_url(redis_url))

    async def setup() -> None:
        await leave_a_dead_run(store, setup_stream, DeadRun("th-lambda", "run-lambda"), died_while="tool")
        await setup_stream.close()

    asyncio.run(setup())
    # WHEN the scheduled event fires, twice
    first = sweeper_handler.lambda_handler({"source": "aws.events"}, None, services=services)
    second = sweeper_handler.lambda_handler({"source": "aws.events"}, None, services=services)
    # THEN the run is ended once
    assert first["ended"] == ["run-lambda"] and first["repairedToolCalls"] == 1
    assert second["ended"] == []


async def test_the_next_message_takes_over_a_thread_whose_run_lease_expired_without_the_sweeper(
    live: str, store: DynamoDBStore, redis_stream: RedisEventStream, model_server: ModelServer
) -> None:
    # GIVEN a run that died during a tool call, longer ago than the lease (30 s): the thread is still claimed
    await leave_a_dead_run(store, redis_stream, DeadRun("th-lease", "run-frozen"), died_while="tool", minutes_ago=1)
    assert (await store.threads.get_thread(USER, "th-lease")).active_run_id == "run-frozen"
    model_server.enqueue(ScriptedTurn(text=["Back again."]))
    async with httpx.AsyncClient(base_url=live, timeout=30) as client:
        # WHEN the user sends the next message (no sweeper has run)
        nxt = await client.post("/api/v1/agent", json=body("th-lease", "run-next", "hello?", "u-2"), headers=bearer())
        replay = await client.get("/api/v1/agent/runs/run-frozen/events", headers=bearer())
        audit = await client.get("/api/v1/threads/th-lease/audit", headers=bearer(scopes=("agent:audit",)))
    # THEN it is admitted and finishes, and the model got a valid, paired context
    assert nxt.status_code == 200, nxt.text
    assert assert_well_formed_run(events_of(nxt.text))["type"] == "RUN_FINISHED"
    sent = [m for m in model_server.requests[-1]["messages"] if m["role"] != "system"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "user"]
    assert sent[1]["tool_calls"][0]["id"] == "call-stuck" and sent[2]["tool_call_id"] == "call-stuck"
    # AND the old run is closed: failed in the ledger, one RUN_ERROR on its stream, the takeover audited
    old = await store.runs.get_run("tenant-1", "run-frozen")
    assert old is not None and (old.status, old.error_code) == (RunStatus.FAILED, "run_failed")
    assert assert_well_formed_run(events_of(replay.text))["code"] == "run_failed"
    swept = [d for d in audit.json()["decisions"] if d["kind"] == "run_swept"]
    assert [d["details"]["reason"] for d in swept] == ["lease_expired"]


async def test_a_run_within_its_lease_keeps_its_thread(
    live: str, store: DynamoDBStore, redis_stream: RedisEventStream
) -> None:
    # GIVEN a run whose heartbeat is recent (its process is alive, or froze less than a lease ago)
    await leave_a_dead_run(store, redis_stream, DeadRun("th-alive", "run-alive"), died_while="tool", minutes_ago=1)
    await store.runs.heartbeat("tenant-1", "run-alive", last_stream_id=None)
    async with httpx.AsyncClient(base_url=live, timeout=30) as client:
        # WHEN another message arrives  THEN it is refused as busy, and the run is untouched
        busy = await client.post("/api/v1/agent", json=body("th-alive", "run-2", "hello?", "u-2"), headers=bearer())
    assert busy.status_code == 409 and busy.json()["error"]["code"] == "thread_busy"
    run = await store.runs.get_run("tenant-1", "run-alive")
    assert run is not None and run.status is RunStatus.RUNNING
