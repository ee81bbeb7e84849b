"""``DELETE /api/v1/threads/{threadId}`` and ``DELETE /api/v1/me``: the caller erases a thread, or all their data.

The work is :mod:`shared.erasure`'s; this module maps it to HTTP (docs/protocols/agent/api-endpoints.md §4, §9).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response

from functions.agent_api.deps import Caller, ErasureService
from shared.auth import ERASE_SCOPE
from shared.errors import Conflict, Forbidden
from shared.runs.intake import check_id

router = APIRouter(prefix="/api/v1", tags=["erasure"])


@router.delete("/threads/{threadId}", status_code=204, response_class=Response)
async def delete_thread(caller: Caller, erasure: ErasureService, threadId: str) -> Response:
    """Delete the thread, its messages, runs and event streams, and cancel its pending memory extraction."""
    check_id("threadId", threadId, where="path")
    await erasure.delete_thread(caller, threadId)
    return Response(status_code=204)


@router.delete("/me")
async def delete_me(caller: Caller, erasure: ErasureService) -> dict[str, Any]:
    """Delete everything the caller owns: automation tasks and their schedules, threads, memories, and pending
    memory extraction. Needs the ``agent:erase`` scope."""
    if not caller.has_scope(ERASE_SCOPE):
        raise Forbidden(f"deleting the account's data needs the {ERASE_SCOPE} scope", code="missing_scope")
    erased = await erasure.delete_user(caller)
    deleted = {"threads": erased.threads, "memories": erased.memories, "automations": erased.automations}
    if erased.busy_threads:
        raise Conflict(
            "some threads have an active run and were not deleted; repeat the request once they end",
            code="thread_busy",
            details={"threadIds": list(erased.busy_threads), "deleted": deleted},
        )
    return {"deleted": deleted}
