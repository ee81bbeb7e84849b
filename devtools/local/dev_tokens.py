"""``POST /playground/dev-token``: the playground page's own token under ``make dev``.

The deployed functions do not ship this module, so no deployed app can mint a token, whatever its settings say;
``GET /playground/config.json`` tells the page whether the route exists.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from shared.auth import AUDIT_SCOPE, mint_local_token
from shared.errors import NotFound

DEV_USER_ID = "local-user"
DEV_TENANT_ID = "local-tenant"


class DevTokenRequest(BaseModel):
    audit: bool = Field(default=False, description=f"add the {AUDIT_SCOPE} scope")


def install_dev_tokens(app: FastAPI, secret: str) -> None:
    """Add ``POST /playground/dev-token`` to ``app`` (the local runner only) and tell the page it exists."""
    app.include_router(dev_token_router(secret))
    app.state.playground_dev_tokens = True


def dev_token_router(secret: str) -> APIRouter:
    """``POST /playground/dev-token``: a token for the local user, answered to loopback callers only."""
    router = APIRouter(include_in_schema=False)

    @router.post("/playground/dev-token")
    async def dev_token(request: Request, body: DevTokenRequest | None = None) -> JSONResponse:
        host = request.client.host if request.client else ""
        if host not in {"127.0.0.1", "::1", "localhost"}:
            raise NotFound("not found")
        scopes = [AUDIT_SCOPE] if body is not None and body.audit else []
        token = mint_local_token(secret, user_id=DEV_USER_ID, tenant_id=DEV_TENANT_ID, scopes=scopes)
        payload: dict[str, Any] = {"token": token, "userId": DEV_USER_ID, "tenantId": DEV_TENANT_ID, "scopes": scopes}
        return JSONResponse(payload, headers={"Cache-Control": "no-store"})

    return router
