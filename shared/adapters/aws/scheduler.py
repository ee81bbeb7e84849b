"""EventBridge Scheduler adapter: one schedule per automation task, in the configured schedule group.

The target is the automation function; its ``Input`` names the task and carries the Scheduler's context keywords
(``<aws.scheduler.scheduled-time>``, ``<aws.scheduler.execution-id>``, ...), which the Scheduler fills in on every
fire. The scheduled time is the same for every retry of one fire, so the handler keys its run on it.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from botocore.exceptions import BotoCoreError, ClientError

from shared.automation.models import AutomationTask, TaskRef
from shared.errors import AgentError, InvalidRequest, ServiceUnavailable
from shared.models import digest

if TYPE_CHECKING:
    from mypy_boto3_scheduler import EventBridgeSchedulerClient

T = TypeVar("T")

_NAME_CHARS = re.compile(r"[^0-9A-Za-z_.-]")
MAX_SCHEDULE_NAME = 64
SCHEDULE_NAME_PREFIX = "task-"

# A fire more than an hour late is stale (the next one is coming); a few retries ride out a throttled Lambda.
RETRY_POLICY = {"MaximumEventAgeInSeconds": 3600, "MaximumRetryAttempts": 3}


def schedule_name(task_id: str) -> str:
    """The schedule's name: ``task-{task_id}``, made of allowed characters and cut to 64 with a digest suffix."""
    name = SCHEDULE_NAME_PREFIX + _NAME_CHARS.sub("_", task_id)
    if len(name) <= MAX_SCHEDULE_NAME:
        return name
    suffix = "-" + digest(task_id)[:12]
    return name[: MAX_SCHEDULE_NAME - len(suffix)] + suffix


def schedule_input(task: AutomationTask) -> str:
    ref = TaskRef(task_id=task.task_id, tenant_id=task.tenant_id, user_id=task.owner_user_id)
    return json.dumps(ref.input_template(), separators=(",", ":"))


class SchedulerError(ServiceUnavailable):
    """The Scheduler did not accept a call (throttled, unavailable, missing permissions)."""

    code = "scheduler_unavailable"


class EventBridgeTaskScheduler:
    """Creates, updates and deletes the schedule of a task (implements ``shared.automation.ports.TaskScheduler``)."""

    def __init__(
        self,
        client_factory: Callable[[], EventBridgeSchedulerClient],
        *,
        group_name: str,
        target_arn: str,
        role_arn: str,
        dead_letter_arn: str | None = None,
    ) -> None:
        self._client_factory = client_factory
        self._client: EventBridgeSchedulerClient | None = None
        self.group_name = group_name
        self._target_arn = target_arn
        self._role_arn = role_arn
        self._dead_letter_arn = dead_letter_arn

    @property
    def client(self) -> EventBridgeSchedulerClient:
        if self._client is None:
            self._client = self._client_factory()
        return self._client

    async def _call(self, fn: Callable[[], T]) -> T:
        try:
            return await asyncio.to_thread(fn)
        except ClientError as exc:
            raise _translate(exc) from exc
        except BotoCoreError as exc:
            raise SchedulerError("the scheduler could not be reached") from exc

    def _definition(self, task: AutomationTask) -> dict[str, Any]:
        target: dict[str, Any] = {
            "Arn": self._target_arn,
            "RoleArn": self._role_arn,
            "Input": schedule_input(task),
            "RetryPolicy": dict(RETRY_POLICY),
        }
        if self._dead_letter_arn:
            # A fire the Scheduler could not deliver after its retries is kept there (sent with the schedule's role).
            target["DeadLetterConfig"] = {"Arn": self._dead_letter_arn}
        return {
            "Name": schedule_name(task.task_id),
            "GroupName": self.group_name,
            "ScheduleExpression": task.schedule_expression,
            "ScheduleExpressionTimezone": task.timezone,
            "FlexibleTimeWindow": {"Mode": "OFF"},
            "State": "ENABLED" if task.enabled else "DISABLED",
            "Description": f"automation task {task.task_id}"[:512],
            "Target": target,
        }

    async def create(self, task: AutomationTask) -> str:
        """Create the task's schedule; returns its ARN."""
        definition = self._definition(task)
        resp = await self._call(lambda: self.client.create_schedule(**definition))
        return resp["ScheduleArn"]

    async def update(self, task: AutomationTask) -> str:
        """Replace the task's schedule definition (recreating it if it went missing); returns its ARN."""
        definition = self._definition(task)
        try:
            resp = await asyncio.to_thread(lambda: self.client.update_schedule(**definition))
        except ClientError as exc:
            if _error_code(exc) != "ResourceNotFoundException":
                raise _translate(exc) from exc
            return await self.create(task)
        except BotoCoreError as exc:
            raise SchedulerError("the scheduler could not be reached") from exc
        return resp["ScheduleArn"]

    async def delete(self, task_id: str) -> None:
        """Delete the task's schedule; a schedule that is already gone is fine."""
        try:
            await asyncio.to_thread(
                lambda: self.client.delete_schedule(Name=schedule_name(task_id), GroupName=self.group_name)
            )
        except ClientError as exc:
            if _error_code(exc) != "ResourceNotFoundException":
                raise _translate(exc) from exc
        except BotoCoreError as exc:
            raise SchedulerError("the scheduler could not be reached") from exc


def _error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _translate(exc: ClientError) -> AgentError:
    """A Scheduler validation error is the caller's (422); anything else is the scheduler's."""
    code = _error_code(exc)
    if code == "ValidationException":
        message = exc.response.get("Error", {}).get("Message", "")
        return InvalidRequest(f"the scheduler rejected the schedule: {message}", code="schedule_rejected")
    return SchedulerError(f"the scheduler call failed ({code or 'unknown error'})")
