"""Contract of the ``TaskScheduler`` port: the same cases on the in-memory fake and the EventBridge Scheduler
adapter (moto). Each case reads back what the scheduler holds for a task: its expression, timezone, state and the
input that names the task and its owner."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from moto import mock_aws

from shared.adapters.aws.scheduler import EventBridgeTaskScheduler, schedule_name
from shared.adapters.in_memory.scheduler import InMemoryTaskScheduler
from shared.automation.models import AutomationTask
from shared.automation.ports import TaskScheduler
from shared.errors import ServiceUnavailable
from tests.support.settings import REGION

GROUP = "agent-tasks-test"
TARGET = "arn:aws:lambda:us-east-1:123456789012:function:automation"
ROLE = "arn:aws:iam::123456789012:role/scheduler"


@dataclass
class Backend:
    scheduler: TaskScheduler
    held: Any  # task_id -> (expression, timezone, enabled, input) or None


def task(task_id: str = "at_1", **changes: Any) -> AutomationTask:
    base: dict[str, Any] = {
        "task_id": task_id,
        "tenant_id": "t1",
        "owner_user_id": "u1",
        "name": "briefing",
        "schedule_expression": "cron(0 8 * * ? *)",
        "timezone": "Europe/Paris",
        "thread_id": "th-1",
    }
    return AutomationTask(**{**base, **changes})


@pytest.fixture(params=["memory", "eventbridge"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    if request.param == "memory":
        fake = InMemoryTaskScheduler(GROUP)

        def held_by_fake(task_id: str) -> tuple[str, str, bool, dict[str, Any]] | None:
            s = fake.schedules.get(task_id)
            return None if s is None else (s.expression, s.timezone, s.enabled, s.input)

        yield Backend(fake, held_by_fake)
        return
    with mock_aws():
        client = boto3.client("scheduler", region_name=REGION)
        client.create_schedule_group(Name=GROUP)
        adapter = EventBridgeTaskScheduler(lambda: client, group_name=GROUP, target_arn=TARGET, role_arn=ROLE)

        def held_by_scheduler(task_id: str) -> tuple[str, str, bool, dict[str, Any]] | None:
            try:
                s = client.get_schedule(Name=schedule_name(task_id), GroupName=GROUP)
            except client.exceptions.ResourceNotFoundException:
                return None
            state = s["State"] == "ENABLED"
            return s["ScheduleExpression"], s["ScheduleExpressionTimezone"], state, json.loads(s["Target"]["Input"])

        yield Backend(adapter, held_by_scheduler)


async def test_a_created_schedule_holds_the_tasks_timing_and_names_the_task(backend: Backend) -> None:
    arn = await backend.scheduler.create(task())
    expression, timezone, enabled, fire_input = backend.held("at_1")
    assert (expression, timezone, enabled) == ("cron(0 8 * * ? *)", "Europe/Paris", True)
    # the fire's input names the task and its owner, and leaves the per-fire keywords to the scheduler
    assert (fire_input["taskId"], fire_input["tenantId"], fire_input["userId"]) == ("at_1", "t1", "u1")
    assert fire_input["scheduledTime"] == "<aws.scheduler.scheduled-time>"
    assert arn.endswith(f"/{GROUP}/{schedule_name('at_1')}")


async def test_a_second_create_of_one_task_is_refused_and_changes_nothing(backend: Backend) -> None:
    await backend.scheduler.create(task())
    with pytest.raises(ServiceUnavailable) as refused:
        await backend.scheduler.create(task(schedule_expression="rate(5 minutes)"))
    assert refused.value.code == "scheduler_unavailable"
    assert backend.held("at_1")[0] == "cron(0 8 * * ? *)"


async def test_update_replaces_the_schedule_and_a_disabled_task_keeps_a_disabled_one(backend: Backend) -> None:
    created = await backend.scheduler.create(task())
    updated = await backend.scheduler.update(task(schedule_expression="rate(1 hour)", timezone="UTC", enabled=False))
    assert updated == created
    assert backend.held("at_1")[:3] == ("rate(1 hour)", "UTC", False)


async def test_update_of_a_missing_schedule_recreates_it(backend: Backend) -> None:
    arn = await backend.scheduler.update(task("at_gone"))
    assert backend.held("at_gone") is not None and arn.endswith(schedule_name("at_gone"))


async def test_delete_removes_only_that_tasks_schedule_and_a_second_delete_is_fine(backend: Backend) -> None:
    await backend.scheduler.create(task("at_1"))
    await backend.scheduler.create(task("at_2"))
    await backend.scheduler.delete("at_1")
    await backend.scheduler.delete("at_1")
    await backend.scheduler.delete("at_never")
    assert backend.held("at_1") is None
    assert backend.held("at_2") is not None
