"""``GET /api/v1/admin/feedback``: a tenant administrator's export of the tenant's feedback on answers (scope
``agent:admin``), with the run, profile and model of each answer, as JSON lines or CSV, a page at a time (the next
page's cursor in the ``Next-Cursor`` header). What a row holds is in ``shared.feedback_export``."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query, Response

from functions.agent_api.deps import Caller, Threads
from shared.feedback_export import DEFAULT_PAGE, MAX_PAGE, render

router = APIRouter(prefix="/api/v1/admin", tags=["usage"])


@router.get(
    "/feedback",
    response_class=Response,
    responses={200: {"content": {"application/x-ndjson": {}, "text/csv": {}}}},
)
async def tenant_feedback(
    caller: Caller,
    threads: Threads,
    since: Annotated[str | None, Query(alias="from", description="a date (YYYY-MM-DD) or an ISO 8601 time")] = None,
    until: Annotated[str | None, Query(alias="to", description="exclusive; a date includes its day")] = None,
    format: Annotated[Literal["jsonl", "csv"], Query()] = "jsonl",
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = DEFAULT_PAGE,
    cursor: str | None = None,
) -> Response:
    entries, next_cursor = await threads.export_feedback(caller, since, until, limit=limit, cursor=cursor)
    body, media_type = render(entries, format)
    headers = {"Next-Cursor": next_cursor} if next_cursor else None
    return Response(content=body, media_type=media_type, headers=headers)
