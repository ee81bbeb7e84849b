"""The in-memory reference fake of the ``TaskScheduler`` port: one schedule per task, kept in a dict.

It keeps what the EventBridge Scheduler adapter sends (expression, timezone, state, the input naming the task)
and answers as that adapter does: a second ``create`` of one task is refused, ``update`` recreates a missing
schedule, deleting a missing one is fine. tests/contract/test_task_scheduler_contract.py runs the same cases on
both.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from shared.automation.models import AutomationTask, TaskRef
from shared.errors import ServiceUnavailable


@dataclass(frozen=True)
class Schedule:
    """What the Scheduler holds for one task."""

    expression: str
    timezone: str
    enabled: bool
    input: dict[str, Any]


class InMemoryTaskScheduler:
    def __init__(self, group_name: str = "agent-tasks", *, account: str = "123456789012") -> None:
        self.group_name = group_name
        self._account = account
        self.schedules: dict[str, Schedule] = {}
        """The schedules by task id."""

    def _arn(self, task_id: str) -> str:
        return f"arn:aws:scheduler:local:{self._account}:schedule/{self.group_name}/task-{task_id}"

    def _put(self, task: AutomationTask) -> str:
        ref = TaskRef(task_id=task.task_id, tenant_id=task.tenant_id, user_id=task.owner_user_id)
        self.schedules[task.task_id] = Schedule(
            expression=task.schedule_expression,
            timezone=task.timezone,
            enabled=task.enabled,
            input=json.loads(json.dumps(ref.input_template())),
        )
        return self._arn(task.task_id)

    async def create(self, task: AutomationTask) -> str:
        if task.task_id in self.schedules:
            # The adapter reports the Scheduler's ConflictException as an unavailable scheduler.
            raise ServiceUnavailable("the scheduler call failed (ConflictException)", code="scheduler_unavailable")
        return self._put(task)

    async def update(self, task: AutomationTask) -> str:
        return self._put(task)

    async def delete(self, task_id: str) -> None:
        self.schedules.pop(task_id, None)
