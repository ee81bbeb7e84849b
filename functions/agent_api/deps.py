"""FastAPI dependencies shared by the app and its routers."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Request

from shared.models import Identity
from shared.wiring import Services


def services_of(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


def current_identity(request: Request, authorization: Annotated[str | None, Header()] = None) -> Identity:
    """The verified caller: user, tenant and scopes come from the bearer token's claims only."""
    return services_of(request).verifier.verify(authorization)


Caller = Annotated[Identity, Depends(current_identity)]
