"""The automation task store in memory: the reference fake of the port ``shared.automation.ports.AutomationStore``.

Tasks live in their owner's partition (tenant, user). A fire only carries what the schedule's input holds, so the
store can also find a task by its id alone; task ids are unique across tenants because the schedule name, which
lives in one Scheduler group for everyone, is derived from them.
"""

from __future__ import annotations

from shared.automation.models import AutomationTask
from shared.errors import Conflict, InvalidRequest, NotFound


class InMemoryAutomationStore:
    """The reference fake: same semantics as the DynamoDB adapter, kept in a dict."""

    def __init__(self) -> None:
        self._tasks: dict[str, AutomationTask] = {}

    async def create(self, task: AutomationTask) -> None:
        if task.task_id in self._tasks:
            raise Conflict("an automation task with this id exists", code="task_exists")
        self._tasks[task.task_id] = task

    async def get(self, tenant_id: str, user_id: str, task_id: str) -> AutomationTask | None:
        task = self._tasks.get(task_id)
        if task is None or task.tenant_id != tenant_id or task.owner_user_id != user_id:
            return None
        return task

    async def find(self, task_id: str) -> AutomationTask | None:
        return self._tasks.get(task_id)

    async def list(
        self, tenant_id: str, user_id: str, *, limit: int, cursor: str | None
    ) -> tuple[list[AutomationTask], str | None]:
        owner = f"{tenant_id}#{user_id}#"
        after = ""
        if cursor is not None:
            if not cursor.startswith(owner):
                raise InvalidRequest("malformed cursor", code="invalid_cursor")
            after = cursor.removeprefix(owner)
        mine = sorted(
            (t for t in self._tasks.values() if t.tenant_id == tenant_id and t.owner_user_id == user_id),
            key=lambda t: t.task_id,
        )
        page = [t for t in mine if t.task_id > after][:limit]
        more = len(page) == limit and any(t.task_id > page[-1].task_id for t in mine)
        return page, f"{owner}{page[-1].task_id}" if more else None

    async def replace(self, task: AutomationTask) -> None:
        if await self.get(task.tenant_id, task.owner_user_id, task.task_id) is None:
            raise NotFound("automation task not found")
        self._tasks[task.task_id] = task

    async def delete(self, tenant_id: str, user_id: str, task_id: str) -> bool:
        if await self.get(tenant_id, user_id, task_id) is None:
            return False
        del self._tasks[task_id]
        return True
