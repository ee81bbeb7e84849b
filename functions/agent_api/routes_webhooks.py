"""A tenant administrator's webhooks (scope ``agent:admin``): ``GET``/``PUT``/``DELETE /api/v1/admin/webhooks``
(the targets every run of the tenant's users is POSTed to when it ends) and ``POST /api/v1/admin/webhooks/secret``
(a new signing secret, answered once). Everything is in ``shared.webhooks.admin``."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Request, Response

from functions.agent_api.deps import Caller, services_of
from shared.auth import ADMIN_SCOPE
from shared.errors import Forbidden
from shared.models import Identity
from shared.webhooks.admin import WebhookAdmin

router = APIRouter(prefix="/api/v1/admin/webhooks", tags=["webhooks"])


async def webhook_admin(request: Request) -> WebhookAdmin:
    return services_of(request).webhook_admin


Admin = Annotated[WebhookAdmin, Depends(webhook_admin)]


def _admin(caller: Identity) -> Identity:
    if not caller.has_scope(ADMIN_SCOPE):
        raise Forbidden(f"this endpoint needs the {ADMIN_SCOPE} scope", code="missing_scope")
    return caller


@router.get("")
async def get_webhooks(caller: Caller, admin: Admin) -> dict[str, Any]:
    return await admin.targets(_admin(caller))


@router.put("")
async def put_webhooks(caller: Caller, admin: Admin, body: Annotated[Any, Body()]) -> dict[str, Any]:
    return await admin.put_targets(_admin(caller), body)


@router.delete("", status_code=204)
async def delete_webhooks(caller: Caller, admin: Admin) -> Response:
    await admin.delete_targets(_admin(caller))
    return Response(status_code=204)


@router.post("/secret")
async def new_webhook_secret(caller: Caller, admin: Admin) -> dict[str, Any]:
    return await admin.new_secret(_admin(caller))
