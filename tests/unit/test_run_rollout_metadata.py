"""A ramped run records its profile, ramp and side where runs are recorded: the run's metadata (ledger record,
messages, ``run finished`` log), and the per-run metrics document. On fakes, through the app and the runner."""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx
import pytest

from functions.agent_api.app import create_app
from shared.adapters.in_memory.automation import InMemoryAutomationStore
from shared.adapters.in_memory.memories import InMemoryMemoryStore
from shared.adapters.in_memory.scheduler import InMemoryTaskScheduler
from shared.adapters.in_memory.store import InMemoryStore
from shared.adapters.in_memory.stream import InMemoryEventStream
from shared.automation.models import AutomationTaskSpec, TaskRef
from shared.models import Identity
from shared.profiles import ProfileCatalog, default_catalog, default_known_tools
from shared.rollouts import RolloutRules
from shared.wiring import ServiceOverrides, Services
from tests.support.scripted_model import ScriptedModel, Turn
from tests.support.settings import make_settings
from tests.support.tokens import bearer

TENANT, USER = "tenant-1", "user-1"


def ramped_catalog(percent: float) -> ProfileCatalog:
    """The shipped profiles with ``percent`` of every tenant's users moved from chat_default to chat_default_b."""
    shipped = {p.name: p for p in default_catalog(default_known_tools())}
    ramp = {"id": "intent-b", "from": "chat_default", "to": "chat_default_b", "percent": percent}
    return ProfileCatalog(shipped, rollout=RolloutRules.model_validate({"ramps": [ramp]}))


def services_with(catalog: ProfileCatalog, store: InMemoryStore, turns: int = 1) -> Services:
    return Services(
        make_settings(embedded=True),
        overrides=ServiceOverrides(
            store=store,
            stream=InMemoryEventStream(),
            memory_store=InMemoryMemoryStore(),
            model=ScriptedModel(*[Turn(text=["done"]) for _ in range(turns)]),
            profiles=catalog,
            automation_store=InMemoryAutomationStore(),
            automation_scheduler=InMemoryTaskScheduler(),
        ),
    )


def emf_documents(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.startswith('{"_aws"')]


@pytest.mark.parametrize(("percent", "profile", "side"), [(100, "chat_default_b", "new"), (0, "chat_default", "base")])
async def test_a_chat_run_records_the_ramp_and_the_side_that_served_it(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture, percent: float, profile: str, side: str
) -> None:
    # GIVEN a ramp that puts the user on one side
    store = InMemoryStore()
    services = services_with(ramped_catalog(percent), store)
    body = {"threadId": "th", "runId": "run-1", "messages": [{"id": "m1", "role": "user", "content": "hi"}]}
    # WHEN the user runs the agent
    with caplog.at_level(logging.INFO, logger="shared.runs.execution"):
        transport = httpx.ASGITransport(app=create_app(services))
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
            response = await client.post("/api/v1/agent", json=body, headers=bearer(USER, TENANT))
        await services.runs.wait_idle()
    # THEN the run is that side's profile, and the run record, its user message and its log line say so
    assert '"RUN_FINISHED"' in response.text
    run = await store.runs.get_run(TENANT, "run-1")
    assert run is not None
    meta = run.meta
    assert (meta.execution_profile_name, meta.rollout_id, meta.rollout_side) == (profile, "intent-b", side)
    stored = await store.threads.read_forward(TENANT, "th", after_seq=0, limit=10)
    assert {(m.meta.rollout_id, m.meta.rollout_side) for m in stored} == {("intent-b", side)}
    finished = next(vars(r) for r in caplog.records if r.getMessage() == "run finished")
    assert (finished["profile"], finished["rollout_id"], finished["rollout_side"]) == (profile, "intent-b", side)
    # AND its metrics are published per profile and per side of the ramp
    (doc,) = emf_documents(capsys.readouterr().out)
    assert (doc["profile"], doc["rollout"], doc["side"]) == (profile, "intent-b", side)


async def test_an_automation_run_is_ramped_by_its_owner(capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN every user's chat_default runs ramped to chat_default_b, and a user's automation task on chat_default
    store = InMemoryStore()
    services = services_with(ramped_catalog(100), store)
    owner = Identity(tenant_id=TENANT, user_id=USER)
    spec = AutomationTaskSpec(name="Brief", schedule_expression="rate(1 day)", prompt="summarise")
    task = await services.automation_service.create(owner, spec)
    # WHEN the task fires
    outcome = await services.automation_runner.fire(TaskRef(task_id=task.task_id), "fire-1")
    # THEN its hidden run ran on the new side, and says so
    assert outcome.status == "succeeded" and outcome.run_id is not None
    run = await store.runs.get_run(TENANT, outcome.run_id)
    assert run is not None
    assert (run.meta.execution_profile_name, run.meta.rollout_side) == ("chat_default_b", "new")
    assert emf_documents(capsys.readouterr().out)[-1]["side"] == "new"
