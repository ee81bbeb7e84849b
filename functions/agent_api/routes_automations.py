"""Automation task CRUD under ``/api/v1/automations``: HTTP to ``AutomationService`` calls and back.

Include it in the app with ``app.include_router(router)``. Every route is owner-scoped through the verified
identity; another user's or tenant's task is a 404 that says nothing about it.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Response

from functions.agent_api.deps import Automations, Caller
from shared.automation.models import AutomationTaskPatch, AutomationTaskSpec
from shared.runs.intake import check_id

router = APIRouter(prefix="/api/v1/automations", tags=["automations"])


@router.get("")
async def list_automations(
    caller: Caller,
    automations: Automations,
    limit: Annotated[int, Query(ge=1, le=100)] = 50,
    cursor: str | None = None,
) -> dict[str, Any]:
    tasks, next_cursor = await automations.list(caller, limit=limit, cursor=cursor)
    body: dict[str, Any] = {"items": [t.view() for t in tasks]}
    if next_cursor:
        body["nextCursor"] = next_cursor
    return body


@router.post("", status_code=201)
async def create_automation(
    caller: Caller, automations: Automations, spec: AutomationTaskSpec, response: Response
) -> dict[str, Any]:
    task = await automations.create(caller, spec)
    response.headers["Location"] = f"{router.prefix}/{task.task_id}"
    return task.view()


@router.get("/{taskId}")
async def get_automation(caller: Caller, automations: Automations, taskId: str) -> dict[str, Any]:
    check_id("taskId", taskId, where="path")
    return (await automations.get(caller, taskId)).view()


@router.put("/{taskId}")
async def update_automation(
    caller: Caller, automations: Automations, taskId: str, patch: AutomationTaskPatch
) -> dict[str, Any]:
    check_id("taskId", taskId, where="path")
    return (await automations.update(caller, taskId, patch)).view()


@router.delete("/{taskId}", status_code=204)
async def delete_automation(caller: Caller, automations: Automations, taskId: str) -> Response:
    check_id("taskId", taskId, where="path")
    await automations.delete(caller, taskId)
    return Response(status_code=204)
