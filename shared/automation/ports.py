"""The automation ports: the task store and the schedule behind each task."""

from __future__ import annotations

from typing import Protocol

from shared.automation.models import AutomationTask


class AutomationStore(Protocol):
    """Automation tasks, in their owner's partition (tenant, user).

    A fire only carries what the schedule's input holds, so the store can also find a task by its id alone; task
    ids are unique across tenants because the schedule name, which lives in one Scheduler group for everyone, is
    derived from them.

    Fake: ``InMemoryAutomationStore`` (shared/adapters/in_memory/automation.py); adapter: ``DynamoDBAutomationStore``
    (shared/adapters/aws/automation_store.py); contract: tests/contract/test_automation_store_contract.py."""

    async def create(self, task: AutomationTask) -> None:
        """Store a new task; Conflict when its id is taken (by anyone)."""
        ...

    async def get(self, tenant_id: str, user_id: str, task_id: str) -> AutomationTask | None:
        """The task in this owner's partition, or None (absent, or someone else's)."""
        ...

    async def find(self, task_id: str) -> AutomationTask | None:
        """The task with this id, whoever owns it (for the automation handler only, never for API callers)."""
        ...

    async def list(
        self, tenant_id: str, user_id: str, *, limit: int, cursor: str | None
    ) -> tuple[list[AutomationTask], str | None]:
        """The owner's tasks ordered by id, a page at a time; the cursor is opaque and bound to the owner."""
        ...

    async def replace(self, task: AutomationTask) -> None:
        """Overwrite an existing task of the same owner; NotFound when it is gone."""
        ...

    async def delete(self, tenant_id: str, user_id: str, task_id: str) -> bool:
        """Remove the task; False when there was nothing to remove."""
        ...


class TaskScheduler(Protocol):
    """The schedule behind each task (EventBridge Scheduler in AWS).

    Fake: ``InMemoryTaskScheduler`` (shared/adapters/in_memory/scheduler.py); adapter: ``EventBridgeTaskScheduler``
    (shared/adapters/aws/scheduler.py); contract: tests/contract/test_task_scheduler_contract.py."""

    async def create(self, task: AutomationTask) -> str:
        """Create the task's schedule; returns an identifier of it (the ARN)."""
        ...

    async def update(self, task: AutomationTask) -> str:
        """Make the schedule match the task (creating it if missing)."""
        ...

    async def delete(self, task_id: str) -> None:
        """Delete the task's schedule; one already gone is fine."""
        ...
