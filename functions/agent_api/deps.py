"""FastAPI dependencies shared by the app and its routers.

All are ``async``: FastAPI runs a plain ``def`` dependency in its thread pool, a thread hand-off per dependency and
request for what is a dictionary lookup."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Request
from starlette.concurrency import run_in_threadpool

from shared.automation.service import AutomationService
from shared.chat import ChatService
from shared.erasure import Erasure
from shared.models import Identity
from shared.runs.deadline import LAMBDA_CONTEXT_HEADER, deadline_from_lambda_header
from shared.runs.service import RunService
from shared.runs.status import RunStatuses
from shared.threads import ThreadService
from shared.wiring import Services


def services_of(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


async def current_identity(request: Request, authorization: Annotated[str | None, Header()] = None) -> Identity:
    """The verified caller: user, tenant and scopes come from the bearer token's claims only. Checked on the event
    loop unless the check can wait on the network (a JWKS fetch), which goes to a worker thread."""
    verifier = services_of(request).verifier
    if verifier.may_block:
        return await run_in_threadpool(verifier.verify, authorization)
    return verifier.verify(authorization)


async def request_deadline(request: Request) -> float | None:
    """The invocation's deadline from the Web Adapter's ``x-amzn-lambda-context`` header (None without one): the
    routes pass it on to the runs this request starts and the streams it serves."""
    return deadline_from_lambda_header(request.headers.get(LAMBDA_CONTEXT_HEADER))


async def all_services(request: Request) -> Services:
    return services_of(request)


async def automation_service(request: Request) -> AutomationService:
    return services_of(request).automation_service


async def run_service(request: Request) -> RunService:
    return services_of(request).runs


async def run_statuses(request: Request) -> RunStatuses:
    return services_of(request).run_statuses


async def chat_service(request: Request) -> ChatService:
    return services_of(request).chat


async def thread_service(request: Request) -> ThreadService:
    return services_of(request).threads


async def erasure_service(request: Request) -> Erasure:
    return services_of(request).erasure


AppServices = Annotated[Services, Depends(all_services)]
Automations = Annotated[AutomationService, Depends(automation_service)]
Caller = Annotated[Identity, Depends(current_identity)]
Deadline = Annotated[float | None, Depends(request_deadline)]
Runs = Annotated[RunService, Depends(run_service)]
Statuses = Annotated[RunStatuses, Depends(run_statuses)]
Chat = Annotated[ChatService, Depends(chat_service)]
Threads = Annotated[ThreadService, Depends(thread_service)]
ErasureService = Annotated[Erasure, Depends(erasure_service)]
