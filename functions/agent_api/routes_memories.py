"""``GET /api/v1/memories``, ``PATCH`` and ``DELETE /api/v1/memories/{memoryId}``: the caller's own memories only."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from functions.agent_api.deps import AppServices, Caller, services_of
from shared.errors import NotFound
from shared.memory.editing import MemoryEditor
from shared.memory.models import MAX_CONTENT_CHARS, Memory, MemoryKind
from shared.runs.intake import check_id

router = APIRouter(prefix="/api/v1/memories", tags=["memories"])


async def memory_editor(request: Request) -> MemoryEditor:
    """Stateless: built per request from the services' memory store and audit log."""
    services = services_of(request)
    return MemoryEditor(services.memories, services.audit_log)


Editor = Annotated[MemoryEditor, Depends(memory_editor)]


def memory_view(memory: Memory) -> dict[str, Any]:
    view: dict[str, Any] = {
        "id": memory.id,
        "kind": memory.kind.value,
        "content": memory.content,
        "status": memory.status.value,
        "confidence": memory.confidence,
        "evidenceQuote": memory.evidence_quote,
        "sourceMessageIds": list(memory.source_message_ids),
        "createdAt": memory.created_at.isoformat(),
        "updatedAt": memory.updated_at.isoformat(),
    }
    for key, value in (
        ("threadId", memory.thread_id),
        ("runId", memory.run_id),
        ("supersededBy", memory.superseded_by),
        ("supersedes", memory.supersedes),
        ("editedBy", memory.edited_by),
        ("statusReason", memory.status_reason),
    ):
        if value:
            view[key] = value
    return view


@router.get("")
async def list_memories(
    caller: Caller,
    services: AppServices,
    includeInactive: Annotated[bool, Query(description="also superseded and retracted memories")] = False,
) -> dict[str, Any]:
    memories = await services.memories.list_memories(caller.tenant_id, caller.user_id, include_inactive=includeInactive)
    return {"items": [memory_view(m) for m in memories]}


class MemoryEdit(BaseModel):
    model_config = ConfigDict(extra="forbid")

    content: str = Field(min_length=1, max_length=MAX_CONTENT_CHARS, pattern=r"\S")
    kind: MemoryKind | None = None


@router.patch("/{memoryId}")
async def edit_memory(caller: Caller, editor: Editor, memoryId: str, body: MemoryEdit) -> dict[str, Any]:
    """A new version with the caller's text; the old one is marked superseded by it, and the edit is audited."""
    check_id("memoryId", memoryId, where="path")
    return memory_view(await editor.edit(caller, memoryId, content=body.content, kind=body.kind))


@router.delete("/{memoryId}", status_code=204, response_class=Response)
async def delete_memory(caller: Caller, services: AppServices, memoryId: str) -> Response:
    """The user's own hard delete (the memory executor can only mark memories superseded or retracted)."""
    check_id("memoryId", memoryId, where="path")
    if not await services.memories.delete(caller.tenant_id, caller.user_id, memoryId):
        raise NotFound("memory not found")
    return Response(status_code=204)
