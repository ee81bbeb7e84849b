"""A tenant administrator's webhooks (scope ``agent:admin``): ``GET``/``PUT``/``DELETE /api/v1/admin/webhooks``
(the targets every run of the tenant's users is POSTed to when it ends) and ``POST /api/v1/admin/webhooks/secret``
(a new signing secret, answered once). Everything is in ``shared.webhooks.admin``."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Request, Response

from functions.agent_api.deps import Caller, services_of
from shared.auth import require_admin
from shared.webhooks.admin import WebhookAdmin

router = APIRouter(prefix="/api/v1/admin/webhooks", tags=["webhooks"])


async def webhook_admin(request: Request) -> WebhookAdmin:
    return services_of(request).webhook_admin


Admin = Annotated[WebhookAdmin, Depends(webhook_admin)]


@router.get("")
async def get_webhooks(caller: Caller, admin: Admin) -> dict[str, Any]:
    return await admin.targets(require_admin(caller))


@router.put("")
async def put_webhooks(caller: Caller, admin: Admin, body: Annotated[Any, Body()]) -> dict[str, Any]:
    return await admin.put_targets(require_admin(caller), body)


@router.delete("", status_code=204)
async def delete_webhooks(caller: Caller, admin: Admin) -> Response:
    await admin.delete_targets(require_admin(caller))
    return Response(status_code=204)


@router.post("/secret")
async def new_webhook_secret(caller: Caller, admin: Admin) -> dict[str, Any]:
    return await admin.new_secret(require_admin(caller))
