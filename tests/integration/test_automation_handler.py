"""The automation function, fed what EventBridge Scheduler would send: a task created through the API, its
schedule's input as stored in (moto's) Scheduler with the context keywords filled in per fire. One fire delivered
twice runs once; the run is hidden from the user's history and visible in audit."""

from __future__ import annotations

import asyncio
import json
import sys
import types
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import boto3
import httpx
import pytest
from ag_ui.core import StepFinishedEvent, StepStartedEvent

from devtools.local.embedded import embedded_stream_client
from functions.agent_api.app import create_app
from functions.agent_api.routes_automations import router
from functions.automation import handler
from shared.adapters.aws.clients import client_factory
from shared.adapters.aws.dynamodb_store import DynamoDBStore
from shared.adapters.aws.memory_pending import DynamoDBPendingExtractions
from shared.adapters.redis_stream import RedisEventStream
from shared.auth import AUDIT_SCOPE
from shared.automation.models import AutomationTaskSpec
from shared.errors import ConfigurationError, Conflict, InvalidRequest
from shared.executors.context import RunContext
from shared.executors.worker import ExecutionResult
from shared.models import Identity, utc_now
from shared.run_events.emitter import RunEmitter
from shared.settings import Settings
from shared.wiring import ServiceOverrides, Services
from tests.support.automation_events import GROUP, PROMPT, SCHEDULER_SETTINGS, LambdaContext, as_delivered, stored_input
from tests.support.scripted_model import ScriptedModel, Turn
from tests.support.settings import REGION, TABLE, make_settings
from tests.support.tokens import bearer

BASE = "/api/v1/automations"
AUDITOR = bearer(scopes=(AUDIT_SCOPE,))


def scheduled_event_envelope(detail: dict[str, Any], *, time: str, event_id: str) -> dict[str, Any]:
    """The shape of ``sam local generate-event cloudwatch scheduled-event``, carrying the task ref in detail."""
    return {
        "id": event_id,
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": "123456789012",
        "time": time,
        "region": REGION,
        "resources": ["arn:aws:events:us-east-1:123456789012:rule/agent-automation-nightly"],
        "detail": detail,
    }


@pytest.fixture
def scheduler(aws: Any) -> Any:
    client = boto3.client("scheduler", region_name=REGION)
    client.create_schedule_group(Name=GROUP)
    return client


@pytest.fixture
def model() -> ScriptedModel:
    return ScriptedModel(fallback=lambda _req: Turn(text=["Here is ", "your briefing."]))


@pytest.fixture
def services(make_services: Any, scheduler: Any, model: ScriptedModel) -> Services:
    built: Services = make_services(model, **SCHEDULER_SETTINGS)
    return built


@pytest.fixture
async def client(services: Services) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(services)
    app.include_router(router)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://app") as http:
        yield http


async def create_task(client: httpx.AsyncClient, **fields: Any) -> dict[str, Any]:
    body = {"name": "Morning briefing", "scheduleExpression": "cron(0 8 ? * MON-FRI *)", "prompt": PROMPT, **fields}
    resp = await client.post(BASE, json=body, headers=bearer())
    assert resp.status_code == 201, resp.text
    task: dict[str, Any] = resp.json()
    return task


async def chat(client: httpx.AsyncClient, services: Services, model: ScriptedModel, thread: str, text: str) -> None:
    model.turns.append(Turn(text=["Good morning to you."]))
    body = {
        "threadId": thread,
        "runId": "run-chat-1",
        "messages": [{"id": "m-chat-1", "role": "user", "content": text}],
        "tools": [],
        "context": [],
    }
    resp = await client.post("/api/v1/agent", json=body, headers=bearer())
    assert resp.status_code == 200
    await services.runs.wait_idle()  # the thread is released just after the stream's last event


# ---- the acceptance path -----------------------------------------------------------------------------------


async def test_the_same_fire_delivered_twice_runs_once_hidden_from_history_and_visible_in_audit(
    client: httpx.AsyncClient, services: Services, scheduler: Any, model: ScriptedModel
) -> None:
    # GIVEN a user who chatted on a thread, and a task created through the API on that thread
    await chat(client, services, model, "th-daily", "Good morning")
    task = await create_task(client, threadId="th-daily")
    schedule_input = stored_input(scheduler, task["taskId"])
    # WHEN the Scheduler delivers one fire twice (a retry: same scheduled time, another execution id)
    first = await handler.handle(
        as_delivered(schedule_input, scheduled_time="2025-01-06T00:00:00Z", execution_id="a1b2c3d4e5f6a7b8"),
        LambdaContext(aws_request_id="req-1"),
        services,
    )
    second = await handler.handle(
        as_delivered(schedule_input, scheduled_time="2025-01-06T00:00:00Z", execution_id="f9e8d7c6b5a4f3e2", attempt=2),
        LambdaContext(aws_request_id="req-2"),
        services,
    )
    # THEN one run happened: the second delivery found the first run
    assert first["status"] == "succeeded" and first["duplicate"] is False
    assert second == {**first, "duplicate": True}
    assert len(model.requests) == 2  # the chat turn and one automation turn
    automation_request = model.requests[1]
    assert automation_request.messages[-1].role == "user" and automation_request.messages[-1].content == PROMPT
    assert automation_request.tools == ()  # the task declared no tools

    # AND the user's history shows the chat only
    history = await client.get("/api/v1/threads/th-daily/history", headers=bearer())
    assert history.status_code == 200
    assert [i["origin"] for i in history.json()["items"]] == ["chat", "chat"]
    assert PROMPT not in history.text and "briefing" not in history.text

    # AND the audit shows the hidden run, its messages and both deliveries
    audit = await client.get("/api/v1/threads/th-daily/audit", headers=AUDITOR)
    assert audit.status_code == 200
    body = audit.json()
    automation_runs = [r for r in body["runs"] if r["origin"] == "automation"]
    assert len(automation_runs) == 1
    run = automation_runs[0]
    assert run["runId"] == first["runId"]
    assert run["hiddenFromUser"] is True and run["executor"] == "worker" and run["status"] == "succeeded"
    assert run["executionProfileName"] == "chat_default"
    hidden = [m for m in body["messages"] if m["hiddenFromUser"]]
    assert [(m["role"], m["content"]) for m in hidden] == [("user", PROMPT), ("assistant", "Here is your briefing.")]
    assert all(m["origin"] == "automation" and m["runId"] == first["runId"] for m in hidden)
    fires = [d for d in body["decisions"] if d["kind"] == "automation_fire"]
    assert sorted(d["details"]["duplicate_delivery"] for d in fires) == [False, True]
    assert {d["details"]["execution_id"] for d in fires} == {"a1b2c3d4e5f6a7b8", "f9e8d7c6b5a4f3e2"}
    assert all(d["run_id"] == first["runId"] and d["details"]["task_id"] == task["taskId"] for d in fires)


async def test_the_next_fire_runs_again(
    client: httpx.AsyncClient, services: Services, scheduler: Any, model: ScriptedModel
) -> None:
    task = await create_task(client)
    schedule_input = stored_input(scheduler, task["taskId"])
    monday = await handler.handle(
        as_delivered(schedule_input, scheduled_time="2025-01-06T00:00:00Z", execution_id="e1"),
        LambdaContext(),
        services,
    )
    tuesday = await handler.handle(
        as_delivered(schedule_input, scheduled_time="2025-01-07T00:00:00Z", execution_id="e2"),
        LambdaContext(),
        services,
    )
    assert monday["runId"] != tuesday["runId"]
    assert not monday["duplicate"] and not tuesday["duplicate"]
    assert len(model.requests) == 2
    audit = (await client.get(f"/api/v1/threads/{task['threadId']}/audit", headers=AUDITOR)).json()
    assert len(audit["runs"]) == 2
    prompts = [m for m in audit["messages"] if m["role"] == "user"]
    assert len(prompts) == 2  # one prompt message per fire, none per delivery


async def test_declared_tools_are_the_only_tools_offered(
    client: httpx.AsyncClient, services: Services, scheduler: Any, model: ScriptedModel
) -> None:
    task = await create_task(client, tools=["get_current_time"])
    event = as_delivered(
        stored_input(scheduler, task["taskId"]), scheduled_time="2025-01-06T00:00:00Z", execution_id="e"
    )
    await handler.handle(event, LambdaContext(), services)
    assert [t.name for t in model.requests[0].tools] == ["get_current_time"]


async def test_a_visible_task_shows_in_history(client: httpx.AsyncClient, services: Services, scheduler: Any) -> None:
    task = await create_task(client, hiddenFromUser=False)
    event = as_delivered(
        stored_input(scheduler, task["taskId"]), scheduled_time="2025-01-06T00:00:00Z", execution_id="e"
    )
    await handler.handle(event, LambdaContext(), services)
    items = (await client.get(f"/api/v1/threads/{task['threadId']}/history", headers=bearer())).json()["items"]
    assert [(i["role"], i["origin"]) for i in items] == [("user", "automation"), ("assistant", "automation")]


# ---- other event shapes ------------------------------------------------------------------------------------


async def test_a_scheduled_event_envelope_with_the_task_in_detail_runs_once(
    client: httpx.AsyncClient, services: Services, model: ScriptedModel
) -> None:
    # GIVEN an EventBridge rule's scheduled event carrying the task reference in detail
    task = await create_task(client)
    event = scheduled_event_envelope(
        {"taskId": task["taskId"], "tenantId": "tenant-1", "userId": "user-1"},
        time="2025-01-06T00:00:00Z",
        event_id="cdc73f9d-aea9-11e3-9d5a-835b769c0d9c",
    )
    # WHEN it is delivered twice
    first = await handler.handle(event, LambdaContext(aws_request_id="r1"), services)
    second = await handler.handle(event, LambdaContext(aws_request_id="r2"), services)
    # THEN it ran once
    assert first["status"] == "succeeded" and second["duplicate"] is True and second["runId"] == first["runId"]
    assert len(model.requests) == 1


async def test_a_task_ref_without_owner_is_found_by_its_id(
    client: httpx.AsyncClient, services: Services, model: ScriptedModel
) -> None:
    task = await create_task(client)
    event = scheduled_event_envelope({"taskId": task["taskId"]}, time="2025-01-06T00:00:00Z", event_id="ev-1")
    outcome = await handler.handle(event, LambdaContext(), services)
    assert outcome["status"] == "succeeded" and len(model.requests) == 1


async def test_a_ref_naming_another_owner_runs_nothing(
    client: httpx.AsyncClient, services: Services, scheduler: Any, model: ScriptedModel
) -> None:
    task = await create_task(client)
    event = as_delivered(
        stored_input(scheduler, task["taskId"]), scheduled_time="2025-01-06T00:00:00Z", execution_id="e"
    )
    event["userId"] = "user-2"
    outcome = await handler.handle(event, LambdaContext(), services)
    assert outcome["status"] == "task_not_found" and outcome["runId"] is None
    assert model.requests == []


async def test_an_input_replayed_by_hand_uses_the_lambda_request_id(
    client: httpx.AsyncClient, services: Services, scheduler: Any, model: ScriptedModel
) -> None:
    # GIVEN the schedule's input exactly as stored (keywords not substituted), as someone replaying it by hand
    task = await create_task(client)
    raw = json.loads(stored_input(scheduler, task["taskId"]))
    # WHEN Lambda retries that invocation (same request id), THEN it runs once
    first = await handler.handle(raw, LambdaContext(aws_request_id="req-7"), services)
    again = await handler.handle(raw, LambdaContext(aws_request_id="req-7"), services)
    assert again["runId"] == first["runId"] and again["duplicate"] is True
    assert len(model.requests) == 1
    # AND without any id at all the input is refused rather than run with a made-up one
    with pytest.raises(InvalidRequest) as refused:
        await handler.handle(raw, object(), services)
    assert refused.value.code == "invalid_fire"


async def test_a_malformed_input_is_refused(services: Services) -> None:
    for event in ({"tenantId": "tenant-1"}, scheduled_event_envelope({}, time="t", event_id="e")):
        with pytest.raises(InvalidRequest) as refused:
            await handler.handle(event, LambdaContext(), services)
        assert refused.value.code == "invalid_fire"


# ---- task state --------------------------------------------------------------------------------------------


async def test_disabled_and_deleted_tasks_run_nothing(
    client: httpx.AsyncClient, services: Services, scheduler: Any, model: ScriptedModel
) -> None:
    task = await create_task(client)
    schedule_input = stored_input(scheduler, task["taskId"])
    await client.put(f"{BASE}/{task['taskId']}", json={"enabled": False}, headers=bearer())
    disabled = await handler.handle(
        as_delivered(schedule_input, scheduled_time="2025-01-06T00:00:00Z", execution_id="e1"),
        LambdaContext(),
        services,
    )
    await client.delete(f"{BASE}/{task['taskId']}", headers=bearer())
    deleted = await handler.handle(
        as_delivered(schedule_input, scheduled_time="2025-01-07T00:00:00Z", execution_id="e2"),
        LambdaContext(),
        services,
    )
    assert disabled["status"] == "disabled" and deleted["status"] == "task_not_found"
    assert model.requests == []


async def test_a_fire_on_a_busy_thread_is_refused_for_a_retry_and_the_retry_runs(
    client: httpx.AsyncClient, services: Services, scheduler: Any, model: ScriptedModel
) -> None:
    # GIVEN a chat run holding the task's thread
    task = await create_task(client)
    owner = Identity(tenant_id="tenant-1", user_id="user-1")
    store = services.store
    assert await store.threads.claim_thread(
        owner, task["threadId"], "run-chat-busy", stale_before=utc_now() - timedelta(hours=1)
    )
    event = as_delivered(
        stored_input(scheduler, task["taskId"]), scheduled_time="2025-01-06T00:00:00Z", execution_id="e1"
    )
    # WHEN the fire arrives, THEN it fails (so the delivery is retried) without storing a run
    with pytest.raises(Conflict) as busy:
        await handler.handle(event, LambdaContext(), services)
    assert busy.value.code == "thread_busy"
    assert await store.runs.list_runs_for_thread("tenant-1", task["threadId"], limit=10) == []
    # WHEN the chat run ends and the retry arrives, THEN the fire runs, once
    await store.threads.release_thread("tenant-1", task["threadId"], "run-chat-busy")
    retried = await handler.handle({**event, "executionId": "e2", "attemptNumber": "2"}, LambdaContext(), services)
    assert retried["status"] == "succeeded" and retried["duplicate"] is False
    assert len(model.requests) == 1


# ---- memory profiles ---------------------------------------------------------------------------------------


async def test_a_memory_task_without_the_memory_executor_fails_clearly_and_runs_nothing(
    client: httpx.AsyncClient, services: Services, scheduler: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "shared.memory.executor", None)  # as if the module were not deployed
    task = await create_task(client, executionProfileName="automation_memory_default", prompt="")
    event = as_delivered(
        stored_input(scheduler, task["taskId"]), scheduled_time="2025-01-06T00:00:00Z", execution_id="e"
    )
    with pytest.raises(ConfigurationError) as failed:
        await handler.handle(event, LambdaContext(), services)
    assert failed.value.code == "memory_executor_unavailable"
    audit = (await client.get(f"/api/v1/threads/{task['threadId']}/audit", headers=AUDITOR)).json()
    assert audit["runs"] == [] and audit["messages"] == []


@dataclass
class RecordingMemoryExecutor:
    """Stands in for the memory executor: records the context it was given and emits its step."""

    step_name: str = "memory"
    contexts: list[RunContext] = field(default_factory=list)

    async def execute(self, ctx: RunContext, emitter: RunEmitter) -> ExecutionResult:
        self.contexts.append(ctx)
        await emitter.emit(StepStartedEvent(step_name=self.step_name))
        await emitter.emit(StepFinishedEvent(step_name=self.step_name))
        return ExecutionResult()


class ServicesWithMemory(Services):
    def __init__(
        self, settings: Settings, *, overrides: ServiceOverrides, memory: RecordingMemoryExecutor | None = None
    ) -> None:
        super().__init__(settings, overrides)
        self.memory = memory or RecordingMemoryExecutor()

    def memory_executor(self) -> RecordingMemoryExecutor:
        return self.memory


async def test_a_memory_task_hands_off_to_the_memory_executor(
    make_services: Any, scheduler: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    stub = types.ModuleType("shared.memory.executor")
    stub.MemoryExecutor = RecordingMemoryExecutor  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "shared.memory.executor", stub)
    base: Services = make_services(ScriptedModel(), **SCHEDULER_SETTINGS)
    services = ServicesWithMemory(base.settings, overrides=base.overrides)
    app = create_app(services)
    app.include_router(router)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://app") as client:
        task = await create_task(client, executionProfileName="automation_memory_default", prompt="")
        event = as_delivered(
            stored_input(scheduler, task["taskId"]), scheduled_time="2025-01-06T00:00:00Z", execution_id="e"
        )
        outcome = await handler.handle(event, LambdaContext(), services)
        audit = (await client.get(f"/api/v1/threads/{task['threadId']}/audit", headers=AUDITOR)).json()
    assert outcome["status"] == "succeeded"
    (ctx,) = services.memory.contexts
    assert ctx.meta.executor.value == "memory" and ctx.meta.origin.value == "automation"
    assert ctx.meta.hidden_from_user is True and ctx.profile.name == "automation_memory_default"
    assert ctx.declared_tools is None  # the memory profile pins its own tools
    (run,) = audit["runs"]
    assert run["executor"] == "memory" and run["hiddenFromUser"] is True
    assert audit["messages"] == []  # a memory run writes no prompt into the thread


@dataclass
class LeaseCheckingMemoryExecutor(RecordingMemoryExecutor):
    """Also records who held the thread's memory-run lease while it ran."""

    holders: list[str | None] = field(default_factory=list)

    async def execute(self, ctx: RunContext, emitter: RunEmitter) -> ExecutionResult:
        marker = await pending_markers().get(ctx.identity.tenant_id, ctx.thread_id)
        self.holders.append(marker.running_run_id if marker is not None else None)
        return await super().execute(ctx, emitter)


def pending_markers() -> DynamoDBPendingExtractions:
    return DynamoDBPendingExtractions(TABLE, client_factory("dynamodb", region=REGION))


async def test_a_memory_task_waits_while_a_coalesced_memory_run_holds_the_thread(
    make_services: Any, scheduler: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    stub = types.ModuleType("shared.memory.executor")
    stub.MemoryExecutor = RecordingMemoryExecutor  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "shared.memory.executor", stub)
    base: Services = make_services(ScriptedModel(), **SCHEDULER_SETTINGS)
    services = ServicesWithMemory(base.settings, overrides=base.overrides, memory=LeaseCheckingMemoryExecutor())
    app = create_app(services)
    app.include_router(router)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://app") as client:
        task = await create_task(client, executionProfileName="automation_memory_default", prompt="")
        # GIVEN the coalescer's memory run on the task's thread holds its lease
        pending, now = pending_markers(), utc_now()
        await pending.note("tenant-1", "user-1", task["threadId"], now=now)
        until = now + timedelta(seconds=900)
        assert await pending.acquire("tenant-1", task["threadId"], "mem-coalesced", now=now, lease_until=until)
        event = as_delivered(
            stored_input(scheduler, task["taskId"]), scheduled_time="2025-01-06T00:00:00Z", execution_id="e"
        )
        # WHEN the memory task fires  THEN thread_busy (the delivery is retried), and no second memory run ran
        with pytest.raises(Conflict) as busy:
            await handler.handle(event, LambdaContext(), services)
        assert busy.value.code == "thread_busy"
        audit = (await client.get(f"/api/v1/threads/{task['threadId']}/audit", headers=AUDITOR)).json()
        assert audit["runs"] == [] and services.memory.contexts == []
        # WHEN the coalesced run ends and the retry arrives  THEN it runs, holding the lease, and gives it back
        await pending.release("tenant-1", task["threadId"], "mem-coalesced")
        outcome = await handler.handle(event, LambdaContext(), services)
    assert outcome["status"] == "succeeded"
    assert services.memory.holders == [outcome["runId"]]  # type: ignore[attr-defined]
    marker = await pending.get("tenant-1", task["threadId"])
    assert marker is not None and marker.running_run_id is None and marker.generation == 1


# ---- the Lambda entry point --------------------------------------------------------------------------------


@pytest.fixture
def fresh_container(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A cold container: no event loop from an earlier invocation; the one the handler creates is closed after."""
    from shared import container

    monkeypatch.setattr(container, "_loop", None)
    yield
    loop = container._loop
    if loop is not None:
        loop.close()


@pytest.mark.usefixtures("fresh_container")
def test_the_lambda_entry_point_handles_a_scheduled_input(store: DynamoDBStore, scheduler: Any) -> None:
    # GIVEN a process like a Lambda container: its own event loop, a task created beforehand
    model = ScriptedModel(fallback=lambda _req: Turn(text=["done"]))
    services = Services(
        make_settings(**SCHEDULER_SETTINGS),
        overrides=ServiceOverrides(store=store, stream=RedisEventStream(embedded_stream_client()), model=model),
    )
    owner = Identity(tenant_id="tenant-1", user_id="user-1")
    spec = AutomationTaskSpec(name="Briefing", schedule_expression="rate(1 day)", prompt=PROMPT)
    task = asyncio.run(services.automation_service.create(owner, spec))
    event = as_delivered(stored_input(scheduler, task.task_id), scheduled_time="2025-01-06T00:00:00Z", execution_id="x")
    # WHEN the runtime invokes the handler twice with the same scheduled input
    first = handler.lambda_handler(event, LambdaContext(), services)
    second = handler.lambda_handler(event, LambdaContext(), services)
    # THEN one hidden automation run was stored
    assert first["status"] == "succeeded" and second["duplicate"] is True
    runs = asyncio.run(store.runs.list_runs_for_thread("tenant-1", task.thread_id, limit=10))
    assert [(r.run_id, r.meta.origin.value, r.meta.hidden_from_user) for r in runs] == [
        (first["runId"], "automation", True)
    ]
    assert len(model.requests) == 1
