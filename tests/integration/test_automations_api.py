"""Automation task CRUD through the ASGI app: DynamoDB and EventBridge Scheduler in moto, tasks kept in step with
their schedules, owner-scoped, with clear 422s for bad configurations and old-system configs accepted."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import boto3
import httpx
import pytest
from botocore.exceptions import ClientError

from functions.agent_api.app import create_app
from functions.agent_api.routes_automations import router
from shared.adapters.aws.scheduler import SchedulerError, schedule_name
from shared.adapters.in_memory.automation import InMemoryAutomationStore
from shared.automation.models import AutomationTask
from shared.wiring import Services
from tests.support.scripted_model import ScriptedModel
from tests.support.settings import REGION, TABLE
from tests.support.tokens import bearer

GROUP = "agent-automation"
FUNCTION_ARN = "arn:aws:lambda:us-east-1:123456789012:function:agent-automation"
ROLE_ARN = "arn:aws:iam::123456789012:role/agent-scheduler"
DEAD_LETTER_ARN = "arn:aws:sqs:us-east-1:123456789012:agent-async-dlq"
SCHEDULER_SETTINGS = {
    "scheduler_group_name": GROUP,
    "scheduler_role_arn": ROLE_ARN,
    "scheduler_dead_letter_arn": DEAD_LETTER_ARN,
    "automation_function_arn": FUNCTION_ARN,
}
BASE = "/api/v1/automations"


def task_body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": "Morning briefing",
        "scheduleExpression": "cron(0 8 ? * MON-FRI *)",
        "timezone": "Asia/Shanghai",
        "prompt": "Summarise what is planned for today.",
    }
    body.update(overrides)
    return body


@pytest.fixture
def scheduler(aws: Any) -> Any:
    client = boto3.client("scheduler", region_name=REGION)
    client.create_schedule_group(Name=GROUP)
    return client


@pytest.fixture
def services(make_services: Any, scheduler: Any) -> Services:
    built: Services = make_services(ScriptedModel(), **SCHEDULER_SETTINGS)
    return built


@pytest.fixture
async def client(services: Services) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(services)
    app.include_router(router)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://app") as http:
        yield http


def schedules_in_group(scheduler: Any) -> list[str]:
    return [s["Name"] for s in scheduler.list_schedules(GroupName=GROUP)["Schedules"]]


# ---- create ------------------------------------------------------------------------------------------------


async def test_create_writes_the_task_and_a_schedule_targeting_the_automation_function(
    client: httpx.AsyncClient, scheduler: Any
) -> None:
    # WHEN a user creates a task
    resp = await client.post(BASE, json=task_body(), headers=bearer())
    # THEN the task comes back with its id and defaults, and a thread of its own
    assert resp.status_code == 201
    task = resp.json()
    assert resp.headers["location"] == f"{BASE}/{task['taskId']}"
    assert task["hiddenFromUser"] is True and task["enabled"] is True
    assert task["executionProfileName"] == "chat_default"
    assert "tenantId" not in task and "enableRouter" not in task
    history = await client.get(f"/api/v1/threads/{task['threadId']}/history", headers=bearer())
    assert history.status_code == 200
    # AND the Scheduler holds a schedule that invokes the automation function with the task reference
    schedule = scheduler.get_schedule(Name=schedule_name(task["taskId"]), GroupName=GROUP)
    assert schedule["ScheduleExpression"] == "cron(0 8 ? * MON-FRI *)"
    assert schedule["ScheduleExpressionTimezone"] == "Asia/Shanghai"
    assert schedule["FlexibleTimeWindow"] == {"Mode": "OFF"}
    assert schedule["State"] == "ENABLED"
    target = schedule["Target"]
    assert target["Arn"] == FUNCTION_ARN and target["RoleArn"] == ROLE_ARN
    # AND a fire the Scheduler cannot deliver is kept in the stack's dead-letter queue, not dropped
    assert target["DeadLetterConfig"] == {"Arn": DEAD_LETTER_ARN}
    assert json.loads(target["Input"]) == {
        "taskId": task["taskId"],
        "tenantId": "tenant-1",
        "userId": "user-1",
        "scheduledTime": "<aws.scheduler.scheduled-time>",
        "executionId": "<aws.scheduler.execution-id>",
        "attemptNumber": "<aws.scheduler.attempt-number>",
    }
    assert len(schedule_name(task["taskId"])) <= 64


async def test_a_named_thread_of_the_caller_is_used(client: httpx.AsyncClient) -> None:
    resp = await client.post(BASE, json=task_body(threadId="th-briefings"), headers=bearer())
    assert resp.status_code == 201 and resp.json()["threadId"] == "th-briefings"
    assert (await client.get("/api/v1/threads/th-briefings/history", headers=bearer())).status_code == 200


async def test_a_thread_of_another_user_cannot_be_used(client: httpx.AsyncClient, scheduler: Any) -> None:
    # GIVEN user-1's task thread
    await client.post(BASE, json=task_body(threadId="th-private"), headers=bearer())
    # WHEN user-2 names it for a task of theirs
    resp = await client.post(BASE, json=task_body(threadId="th-private"), headers=bearer(user="user-2"))
    # THEN it is not found, and user-2 has no task
    assert resp.status_code == 404
    listing = await client.get(BASE, headers=bearer(user="user-2"))
    assert listing.json()["items"] == []
    assert len(schedules_in_group(scheduler)) == 1


# ---- CRUD against both store implementations -------------------------------------------------------------


@pytest.mark.parametrize("backend", ["dynamodb", "memory"])
async def test_crud_round_trip(services: Services, client: httpx.AsyncClient, backend: str) -> None:
    if backend == "memory":
        services.overrides = dataclasses.replace(services.overrides, automation_store=InMemoryAutomationStore())
    created = (await client.post(BASE, json=task_body(tools=["get_current_time"]), headers=bearer())).json()
    task_id = created["taskId"]
    second = (await client.post(BASE, json=task_body(name="Weekly review"), headers=bearer())).json()

    listing = (await client.get(BASE, headers=bearer())).json()
    assert sorted(t["taskId"] for t in listing["items"]) == sorted([task_id, second["taskId"]])
    page = (await client.get(BASE, params={"limit": 1}, headers=bearer())).json()
    rest = (await client.get(BASE, params={"limit": 1, "cursor": page["nextCursor"]}, headers=bearer())).json()
    assert {page["items"][0]["taskId"], rest["items"][0]["taskId"]} == {task_id, second["taskId"]}

    fetched = (await client.get(f"{BASE}/{task_id}", headers=bearer())).json()
    assert fetched == created

    updated = await client.put(
        f"{BASE}/{task_id}", json={"scheduleExpression": "rate(2 hours)", "enabled": False}, headers=bearer()
    )
    assert updated.status_code == 200
    body = updated.json()
    assert body["scheduleExpression"] == "rate(2 hours)" and body["enabled"] is False
    assert body["name"] == created["name"] and body["tools"] == ["get_current_time"]  # unsent fields stay
    assert (await client.get(f"{BASE}/{task_id}", headers=bearer())).json() == body

    deleted = await client.delete(f"{BASE}/{task_id}", headers=bearer())
    assert deleted.status_code == 204
    assert (await client.get(f"{BASE}/{task_id}", headers=bearer())).status_code == 404
    remaining = (await client.get(BASE, headers=bearer())).json()["items"]
    assert [t["taskId"] for t in remaining] == [second["taskId"]]


async def test_update_and_delete_propagate_to_the_scheduler(client: httpx.AsyncClient, scheduler: Any) -> None:
    task_id = (await client.post(BASE, json=task_body(), headers=bearer())).json()["taskId"]
    name = schedule_name(task_id)
    # WHEN the task is rescheduled and disabled
    await client.put(
        f"{BASE}/{task_id}",
        json={"scheduleExpression": "rate(15 minutes)", "timezone": "Europe/Paris", "enabled": False},
        headers=bearer(),
    )
    # THEN the schedule says so, still targeting the same function with the same task reference
    schedule = scheduler.get_schedule(Name=name, GroupName=GROUP)
    assert schedule["ScheduleExpression"] == "rate(15 minutes)"
    assert schedule["ScheduleExpressionTimezone"] == "Europe/Paris"
    assert schedule["State"] == "DISABLED"
    assert schedule["FlexibleTimeWindow"] == {"Mode": "OFF"}
    assert json.loads(schedule["Target"]["Input"])["taskId"] == task_id
    assert schedule["Target"]["DeadLetterConfig"] == {"Arn": DEAD_LETTER_ARN}
    # WHEN the task is deleted, THEN so is its schedule
    await client.delete(f"{BASE}/{task_id}", headers=bearer())
    with pytest.raises(ClientError) as missing:
        scheduler.get_schedule(Name=name, GroupName=GROUP)
    assert missing.value.response["Error"]["Code"] == "ResourceNotFoundException"


# ---- owner scoping -----------------------------------------------------------------------------------------


async def test_another_users_or_tenants_task_is_not_found(client: httpx.AsyncClient, scheduler: Any) -> None:
    secret = task_body(name="Secret project digest", prompt="Summarise the secret project")
    task_id = (await client.post(BASE, json=secret, headers=bearer())).json()["taskId"]
    for intruder in (bearer(user="user-2"), bearer(tenant="tenant-2")):
        responses = [
            await client.get(f"{BASE}/{task_id}", headers=intruder),
            await client.put(f"{BASE}/{task_id}", json={"enabled": False}, headers=intruder),
            await client.delete(f"{BASE}/{task_id}", headers=intruder),
        ]
        for resp in responses:
            assert resp.status_code == 404
            assert resp.json()["error"]["code"] == "not_found"
            assert "ecret" not in resp.text and task_id not in resp.text
        assert (await client.get(BASE, headers=intruder)).json()["items"] == []
    # AND the owner's task and schedule are untouched
    owner_view = (await client.get(f"{BASE}/{task_id}", headers=bearer())).json()
    assert owner_view["enabled"] is True
    assert scheduler.get_schedule(Name=schedule_name(task_id), GroupName=GROUP)["State"] == "ENABLED"


async def test_a_cursor_cannot_reach_another_users_tasks(client: httpx.AsyncClient) -> None:
    for name in ("one", "two"):
        await client.post(BASE, json=task_body(name=name), headers=bearer())
    cursor = (await client.get(BASE, params={"limit": 1}, headers=bearer())).json()["nextCursor"]
    resp = await client.get(BASE, params={"cursor": cursor}, headers=bearer(user="user-2"))
    assert resp.status_code == 422 and resp.json()["error"]["code"] == "invalid_cursor"


async def test_requests_without_a_token_get_401(client: httpx.AsyncClient) -> None:
    assert (await client.get(BASE)).status_code == 401
    assert (await client.post(BASE, json=task_body())).status_code == 401


# ---- validation --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "expression",
    [
        "cron(0 8 * * *)",  # five fields: the Unix habit
        "cron(0 8 * * MON *)",  # day-of-month and day-of-week both set
        "cron(0 24 * * ? *)",  # hour out of range
        "cron(61 8 ? * MON *)",  # minute out of range
        "rate(1 minutes)",  # plural unit for 1
        "rate(0 minutes)",
        "rate(5 weeks)",
        "at(2030-01-01T08:00:00)",  # one-time schedules are not tasks
        "every day at 8",
    ],
)
async def test_a_bad_schedule_expression_gets_422_naming_the_field(
    client: httpx.AsyncClient, scheduler: Any, expression: str
) -> None:
    resp = await client.post(BASE, json=task_body(scheduleExpression=expression), headers=bearer())
    assert resp.status_code == 422
    error = resp.json()["error"]
    assert error["code"] == "invalid_request"
    assert [d["loc"][-1] for d in error["details"]] == ["scheduleExpression"]
    assert (await client.get(BASE, headers=bearer())).json()["items"] == []
    assert schedules_in_group(scheduler) == []


@pytest.mark.parametrize(
    "expression",
    ["cron(0/15 8-18 ? * MON-FRI *)", "cron(0 9 1,15 * ? 2025-2030)", "cron(0 10 ? * 6L *)", "rate(1 day)"],
)
async def test_valid_schedule_expressions_are_accepted(client: httpx.AsyncClient, expression: str) -> None:
    resp = await client.post(BASE, json=task_body(scheduleExpression=expression), headers=bearer())
    assert resp.status_code == 201, resp.text


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"executionProfileName": "no_such_profile"}, "executionProfileName"),
        ({"timezone": "Mars/Olympus"}, "timezone"),
        ({"tools": ["memory_write"]}, "tools"),  # a memory tool on a worker profile
        ({"tools": ["launch_rockets"]}, "tools"),
        ({"prompt": "   "}, "prompt"),  # a worker task must say something
        ({"threadId": "bad id with spaces"}, "threadId"),
        ({"name": ""}, "name"),
        ({"surprise": True}, "surprise"),
    ],
)
async def test_a_bad_field_gets_422_naming_it(
    client: httpx.AsyncClient, scheduler: Any, override: dict[str, Any], field: str
) -> None:
    resp = await client.post(BASE, json=task_body(**override), headers=bearer())
    assert resp.status_code == 422, resp.text
    assert field in [str(part) for d in resp.json()["error"]["details"] for part in d["loc"]]
    assert schedules_in_group(scheduler) == []


async def test_a_bad_update_changes_nothing(client: httpx.AsyncClient, scheduler: Any) -> None:
    task_id = (await client.post(BASE, json=task_body(), headers=bearer())).json()["taskId"]
    resp = await client.put(f"{BASE}/{task_id}", json={"scheduleExpression": "cron(* * * * *)"}, headers=bearer())
    assert resp.status_code == 422
    assert (await client.get(f"{BASE}/{task_id}", headers=bearer())).json()["scheduleExpression"] == (
        "cron(0 8 ? * MON-FRI *)"
    )
    assert scheduler.get_schedule(Name=schedule_name(task_id), GroupName=GROUP)["ScheduleExpression"] == (
        "cron(0 8 ? * MON-FRI *)"
    )


# ---- old-system configurations -----------------------------------------------------------------------------


async def test_a_legacy_config_with_enable_router_is_accepted_and_the_field_dropped(
    client: httpx.AsyncClient, aws: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # GIVEN a task configuration as the old system wrote it: snake_case, with the router switch
    legacy = {
        "name": "Nightly memory pass",
        "schedule_expression": "cron(30 2 * * ? *)",
        "timezone": "Asia/Shanghai",
        "execution_profile_name": "automation_memory_default",
        "hidden_from_user": True,
        "enable_router": True,
        "task_type": "memory_extraction",
    }
    # WHEN it is posted
    with caplog.at_level(logging.WARNING, logger="shared.automation.models"):
        resp = await client.post(BASE, json=legacy, headers=bearer())
    # THEN it is accepted, the router switch is ignored and logged once, and nothing stores it
    assert resp.status_code == 201, resp.text
    task = resp.json()
    assert task["executionProfileName"] == "automation_memory_default"
    assert task["taskType"] == "memory_extraction"
    assert "enableRouter" not in task and "enable_router" not in task
    warnings = [r for r in caplog.records if r.name == "shared.automation.models"]
    assert len(warnings) == 1 and getattr(warnings[0], "field", None) == "enable_router"
    items = boto3.client("dynamodb", region_name=REGION).scan(TableName=TABLE)["Items"]
    assert not any("enable_router" in item for item in items)


async def test_profile_short_form_is_accepted(client: httpx.AsyncClient) -> None:
    resp = await client.post(BASE, json=task_body(profile="chat_default_b"), headers=bearer())
    assert resp.status_code == 201 and resp.json()["executionProfileName"] == "chat_default_b"


# ---- the scheduler failing ---------------------------------------------------------------------------------


class FailingScheduler:
    """A Scheduler that is down: every call fails as the adapter reports an unavailable Scheduler."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def create(self, task: AutomationTask) -> str:
        self.calls.append(f"create:{task.task_id}")
        raise SchedulerError("the scheduler call failed (ThrottlingException)")

    async def update(self, task: AutomationTask) -> str:
        self.calls.append(f"update:{task.task_id}")
        raise SchedulerError("the scheduler call failed (ThrottlingException)")

    async def delete(self, task_id: str) -> None:
        self.calls.append(f"delete:{task_id}")
        raise SchedulerError("the scheduler call failed (ThrottlingException)")


async def test_a_failed_schedule_creation_leaves_no_task(services: Services, client: httpx.AsyncClient) -> None:
    failing = FailingScheduler()
    services.overrides = dataclasses.replace(services.overrides, automation_scheduler=failing)
    resp = await client.post(BASE, json=task_body(), headers=bearer())
    assert resp.status_code >= 500
    assert resp.json()["error"]["code"] == "scheduler_unavailable"
    assert len(failing.calls) == 1
    assert (await client.get(BASE, headers=bearer())).json()["items"] == []


async def test_a_failed_schedule_update_or_delete_keeps_the_task_as_it_was(make_services: Any, scheduler: Any) -> None:
    # GIVEN a task created while the Scheduler worked
    services: Services = make_services(ScriptedModel(), **SCHEDULER_SETTINGS)
    app = create_app(services)
    app.include_router(router)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://app") as http:
        created = (await http.post(BASE, json=task_body(), headers=bearer())).json()
        # WHEN the Scheduler goes down (a fresh Services instance: the service is built once per instance)
        broken = Services(
            services.settings,
            overrides=dataclasses.replace(services.overrides, automation_scheduler=FailingScheduler()),
        )
        broken_app = create_app(broken)
        broken_app.include_router(router)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=broken_app), base_url="http://app") as down:
            update = await down.put(f"{BASE}/{created['taskId']}", json={"enabled": False}, headers=bearer())
            delete = await down.delete(f"{BASE}/{created['taskId']}", headers=bearer())
        # THEN both fail and the task is exactly as before, with its schedule
        assert update.status_code >= 500 and delete.status_code >= 500
        assert (await http.get(f"{BASE}/{created['taskId']}", headers=bearer())).json() == created
    assert scheduler.get_schedule(Name=schedule_name(created["taskId"]), GroupName=GROUP)["State"] == "ENABLED"
