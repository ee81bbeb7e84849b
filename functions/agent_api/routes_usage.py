"""``GET /api/v1/usage`` (the caller's own usage and limits), and a tenant administrator's endpoints (scope
``agent:admin``): ``GET /api/v1/admin/usage`` (the tenant's month per user) and
``GET``/``PUT``/``DELETE /api/v1/admin/users/{userId}/limits`` (a user's own limits, in the admin's tenant only).
Everything is in ``shared.limits.usage``."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, Query, Request, Response

from functions.agent_api.deps import Caller, services_of
from shared.auth import require_admin
from shared.limits.usage import UsageReports
from shared.limits.windows import Windows
from shared.models import utc_now

router = APIRouter(prefix="/api/v1", tags=["usage"])


async def usage_reports(request: Request) -> UsageReports:
    return services_of(request).usage_reports


Reports = Annotated[UsageReports, Depends(usage_reports)]


@router.get("/usage")
async def my_usage(caller: Caller, reports: Reports) -> dict[str, Any]:
    return await reports.caller_usage(caller)


@router.get(
    "/admin/usage",
    response_class=Response,
    responses={200: {"content": {"application/x-ndjson": {}, "text/csv": {}}}},
)
async def tenant_usage(
    caller: Caller,
    reports: Reports,
    month: Annotated[str | None, Query(description="YYYY-MM; default: the current month (UTC)")] = None,
    format: Annotated[Literal["jsonl", "csv"], Query()] = "jsonl",
) -> Response:
    admin = require_admin(caller)
    body, media_type = await reports.tenant_usage(admin, month or Windows.at(utc_now()).month_label, fmt=format)
    return Response(content=body, media_type=media_type)


@router.get("/admin/users/{userId}/limits")
async def get_user_limits(caller: Caller, reports: Reports, userId: str) -> dict[str, Any]:
    return await reports.user_limits(require_admin(caller), userId)


@router.put("/admin/users/{userId}/limits")
async def put_user_limits(
    caller: Caller, reports: Reports, userId: str, body: Annotated[dict[str, Any], Body()]
) -> dict[str, Any]:
    return await reports.set_user_limits(require_admin(caller), userId, body)


@router.delete("/admin/users/{userId}/limits", status_code=204)
async def delete_user_limits(caller: Caller, reports: Reports, userId: str) -> Response:
    await reports.delete_user_limits(require_admin(caller), userId)
    return Response(status_code=204)
