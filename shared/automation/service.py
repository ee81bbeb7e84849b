"""Owner-scoped CRUD of automation tasks, keeping each task and its schedule in step.

Every method takes the caller's verified identity; a task of another user or tenant is ``NotFound``, never
someone else's data. Writes go task first, schedule second, and undo the first when the second fails, so a caller
never ends up with a task without a schedule (or a schedule firing for a task that does not exist).
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from shared.automation.models import AutomationTask, AutomationTaskPatch, AutomationTaskSpec
from shared.automation.ports import AutomationStore, TaskScheduler
from shared.errors import InvalidRequest, NotFound
from shared.models import ExecutorKind, Identity, utc_now
from shared.ports import ConversationStore
from shared.profiles import MEMORY_TOOL_NAMES, Profiles
from shared.runs.intake import check_id

logger = logging.getLogger(__name__)

MAX_PAGE = 100


def new_task_id() -> str:
    return f"at_{uuid.uuid4().hex}"


def _field_error(field: str, message: str, *, loc: list[str | int] | None = None) -> InvalidRequest:
    return InvalidRequest(
        message,
        details=[{"loc": loc or ["body", field], "msg": message, "type": "value_error"}],
    )


class AutomationService:
    def __init__(
        self,
        tasks: AutomationStore,
        scheduler: TaskScheduler,
        threads: ConversationStore,
        profiles: Profiles,
        server_tools: frozenset[str],
    ) -> None:
        self._tasks = tasks
        self._scheduler = scheduler
        self._threads = threads
        self._profiles = profiles
        self._server_tools = server_tools

    # ---- reads ---------------------------------------------------------------------------------------------

    async def get(self, caller: Identity, task_id: str) -> AutomationTask:
        task = await self._tasks.get(caller.tenant_id, caller.user_id, task_id)
        if task is None:
            raise NotFound("automation task not found")
        return task

    async def list(
        self, caller: Identity, *, limit: int = 50, cursor: str | None = None
    ) -> tuple[list[AutomationTask], str | None]:
        return await self._tasks.list(caller.tenant_id, caller.user_id, limit=min(limit, MAX_PAGE), cursor=cursor)

    # ---- writes --------------------------------------------------------------------------------------------

    async def create(self, caller: Identity, spec: AutomationTaskSpec) -> AutomationTask:
        task_id = new_task_id()
        thread_id = spec.thread_id or f"th_{task_id}"
        now = utc_now()
        task = AutomationTask(
            task_id=task_id,
            tenant_id=caller.tenant_id,
            owner_user_id=caller.user_id,
            name=spec.name,
            schedule_expression=spec.schedule_expression,
            timezone=spec.timezone,
            execution_profile_name=spec.execution_profile_name,
            thread_id=thread_id,
            prompt=spec.prompt,
            tools=tuple(spec.tools),
            hidden_from_user=spec.hidden_from_user,
            enabled=spec.enabled,
            task_type=spec.task_type,
            created_at=now,
            updated_at=now,
        )
        self._check(task)
        # Opening the thread first checks that a thread the caller named is theirs (NotFound otherwise).
        await self._threads.open_thread(caller, thread_id)
        await self._tasks.create(task)
        try:
            await self._scheduler.create(task)
        except BaseException:
            await self._tasks.delete(caller.tenant_id, caller.user_id, task_id)
            logger.warning("automation task removed: its schedule could not be created", extra={"task_id": task_id})
            raise
        logger.info(
            "automation task created",
            extra={"task_id": task_id, "tenant_id": caller.tenant_id, "profile": task.execution_profile_name},
        )
        return task

    async def update(self, caller: Identity, task_id: str, patch: AutomationTaskPatch) -> AutomationTask:
        current = await self.get(caller, task_id)
        changes: dict[str, Any] = patch.changes()
        if "tools" in changes:
            changes["tools"] = tuple(changes["tools"])
        # Each field was validated by the patch model; the merged task is checked as a whole below.
        updated = current.model_copy(update={**changes, "updated_at": utc_now()})
        self._check(updated)
        if updated.thread_id != current.thread_id:
            await self._threads.open_thread(caller, updated.thread_id)
        await self._tasks.replace(updated)
        try:
            await self._scheduler.update(updated)
        except BaseException:
            await self._tasks.replace(current)
            logger.warning(
                "automation task update undone: the schedule could not be updated", extra={"task_id": task_id}
            )
            raise
        return updated

    async def delete(self, caller: Identity, task_id: str) -> None:
        """Delete the schedule, then the task: a failure in between leaves a task the caller can delete again,
        never a schedule firing for a task that is gone."""
        task = await self.get(caller, task_id)
        await self._scheduler.delete(task.task_id)
        await self._tasks.delete(caller.tenant_id, caller.user_id, task.task_id)
        logger.info("automation task deleted", extra={"task_id": task_id, "tenant_id": caller.tenant_id})

    # ---- validation that needs the catalog -----------------------------------------------------------------

    def _check(self, task: AutomationTask) -> None:
        check_id("threadId", task.thread_id)
        if task.execution_profile_name not in self._profiles.names:
            raise _field_error(
                "executionProfileName",
                f"unknown execution profile {task.execution_profile_name!r}; "
                f"use one of: {', '.join(sorted(self._profiles.names))}",
            )
        profile = self._profiles.get(task.execution_profile_name)
        allowlist = profile.tool_policy.allowlist
        for index, tool in enumerate(task.tools):
            if profile.executor is ExecutorKind.MEMORY:
                allowed = tool in MEMORY_TOOL_NAMES
            else:
                allowed = tool in self._server_tools and (allowlist is None or tool in allowlist)
            if not allowed:
                raise _field_error(
                    "tools",
                    f"tool {tool!r} is not available to profile {profile.name!r}",
                    loc=["body", "tools", index],
                )
        if profile.executor is ExecutorKind.WORKER and not task.prompt.strip():
            raise _field_error("prompt", "a task on a worker profile needs a prompt (the message it sends)")
