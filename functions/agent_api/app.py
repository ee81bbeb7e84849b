"""The FastAPI app factory. Routes translate HTTP to calls on ``shared`` services and back; nothing more."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import FastAPI, Header, Query, Request
from fastapi.responses import StreamingResponse

from functions.agent_api.cors import install_cors
from functions.agent_api.deps import Caller
from functions.agent_api.errors import install_error_handlers
from functions.agent_api.playground import page_router as playground_router
from functions.agent_api.routes_automations import router as automations_router
from functions.agent_api.routes_memories import router as memories_router
from functions.agent_api.sse import PING, SSE_HEADERS, OwnedRunResponse, frame, frames
from shared.auth import AUDIT_SCOPE
from shared.errors import Forbidden, InvalidRequest, PayloadTooLarge
from shared.executors.context import RunContext
from shared.models import ExecutionMeta, ExecutorKind, Message, Origin, Role
from shared.ports import StreamEntry
from shared.runs import intake
from shared.runs.deadline import LAMBDA_CONTEXT_HEADER, deadline_from_lambda_header, invocation_deadline
from shared.runs.pending_calls import settle_pending_calls
from shared.settings import Settings
from shared.stream_keys import thread_stream_key
from shared.wiring import Services

logger = logging.getLogger(__name__)

CHAT_PROFILE = "chat_default"


def message_view(msg: Message) -> dict[str, Any]:
    view: dict[str, Any] = {
        "id": msg.id,
        "role": msg.role.value,
        "content": msg.content,
        "createdAt": msg.created_at.isoformat(),
        "origin": msg.meta.origin.value,
        "executor": msg.meta.executor.value,
        "executionProfileName": msg.meta.execution_profile_name,
    }
    if msg.run_id:
        view["runId"] = msg.run_id
    if msg.tool_calls:
        view["toolCalls"] = [
            {"id": tc.id, "type": "function", "function": {"name": tc.name, "arguments": tc.arguments}}
            for tc in msg.tool_calls
        ]
    if msg.tool_call_id:
        view["toolCallId"] = msg.tool_call_id
    if msg.flags.get("partial"):
        view["partial"] = True
    return view


async def read_limited_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"request body is larger than {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"request body is larger than {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def run_frames(entries: AsyncIterator[StreamEntry | None]) -> AsyncIterator[str]:
    """SSE frames of a run; an event rebuilt by the server (empty id, not on the stream) has no ``id:`` line, so a
    client's Last-Event-ID stays on the last event it can resume from."""
    async for entry in entries:
        if entry is not None and not entry.id:
            yield f"data: {json.dumps(entry.event, separators=(',', ':'), ensure_ascii=False)}\n\n"
        else:
            yield PING if entry is None else frame(entry)


def _encode_seq(seq: int) -> str:
    return base64.urlsafe_b64encode(f"seq:{seq}".encode()).decode()


def _decode_seq(cursor: str) -> int:
    try:
        text = base64.urlsafe_b64decode(cursor.encode()).decode()
        if not text.startswith("seq:"):
            raise ValueError(text)
        return int(text[4:])
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidRequest("malformed cursor", code="invalid_cursor") from exc


def request_deadline(request: Request) -> float | None:
    """The invocation's deadline from the Web Adapter's ``x-amzn-lambda-context`` header (None without one); also
    set for the run this request starts, which inherits it."""
    deadline = deadline_from_lambda_header(request.headers.get(LAMBDA_CONTEXT_HEADER))
    invocation_deadline.set(deadline)
    return deadline


async def _exercise_routes(app: FastAPI) -> None:
    """Two requests to the app itself during start-up, so that what FastAPI and our dependencies build on the first
    request (route handlers, the auth dependency's worker thread, the error handlers) is built at init: the health
    check, and a run request without a token (refused with 401 before anything is read or stored)."""
    import httpx

    try:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://start-up") as client:
            await client.get("/healthz")
            await client.post("/api/v1/agent", content=b"{}")
    except Exception:
        logger.info("start-up requests failed; the first request builds the routes", exc_info=True)


def create_app(services: Services | None = None) -> FastAPI:
    if services is None:
        from shared.observability import configure_logging

        configure_logging()
    svc = services or Services(Settings.from_env())
    _ = svc.tools  # server tools (plugins included) register at start: a duplicate or broken one stops it here

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        # Lambda's init (the Web Adapter waits for the readiness check): clients and libraries are built here, not
        # on the first request.
        svc.warm_up()
        try:
            await asyncio.wait_for(svc.connect(), timeout=2.0)
        except Exception:
            logger.warning("could not open connections during start-up; the first request will", exc_info=True)
        await _exercise_routes(_app)
        yield
        await svc.runs.wait_idle()

    app = FastAPI(
        title="Agent backend",
        version="1.0.0",
        description="AG-UI runs over SSE with a worker executor; see docs/protocols/agent.",
        lifespan=lifespan,
    )
    app.state.services = svc
    install_error_handlers(app)
    install_cors(app, svc.settings.cors_allowed_origins)
    app.include_router(automations_router)
    app.include_router(memories_router)
    if svc.settings.playground_enabled:
        app.include_router(playground_router)

    @app.get("/healthz", tags=["ops"])
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.post(
        "/api/v1/agent",
        tags=["runs"],
        response_class=StreamingResponse,
        responses={200: {"content": {"text/event-stream": {}}, "description": "AG-UI events"}},
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/RunAgentInput"}}},
            }
        },
    )
    async def run_agent(request: Request, caller: Caller) -> StreamingResponse:
        deadline = request_deadline(request)
        body = await read_limited_body(request, svc.settings.max_body_bytes)
        run_input = intake.parse_run_input(body)
        profile = svc.profiles.resolve(CHAT_PROFILE, tenant_id=caller.tenant_id)
        meta = ExecutionMeta(
            origin=Origin.CHAT,
            executor=ExecutorKind.WORKER,
            execution_profile_name=profile.name,
            hidden_from_user=False,
        )
        new_messages = intake.run_messages(run_input, meta)
        users = [m.content for m in new_messages if m.role is Role.USER]
        ctx = RunContext(
            identity=caller,
            thread_id=run_input.thread_id,
            run_id=run_input.run_id,
            profile=profile,
            meta=meta,
            client_tools=intake.client_tools(run_input),
            context_notes=intake.context_notes(run_input),
            request_summary=f"chat run, {len(run_input.messages)} messages from client",
            latest_user_text=users[-1] if users else "",
        )
        admission = await svc.runs.admit(
            ctx,
            body_digest=intake.body_digest(run_input),
            new_messages=new_messages,
            executor=svc.worker(),
            settle=lambda fresh, recent: settle_pending_calls(
                svc.store,
                caller.tenant_id,
                run_input.thread_id,
                fresh,
                run_id=run_input.run_id,
                meta=meta,
                recent=recent,
            ),
        )
        run_id = admission.run.run_id
        return OwnedRunResponse(
            run_frames(svc.runs.tail_run(caller.tenant_id, run_id, deadline=deadline)),
            settled=lambda: svc.runs.wait_settled(caller.tenant_id, run_id),
            media_type="text/event-stream",
            headers=SSE_HEADERS,
        )

    @app.get("/api/v1/threads/{threadId}/history", tags=["threads"])
    async def history(
        caller: Caller,
        threadId: str,
        limit: Annotated[int, Query(ge=1, le=200)] = 50,
        cursor: str | None = None,
    ) -> dict[str, Any]:
        thread_id = threadId
        intake.check_id("threadId", thread_id, where="path")
        await svc.store.get_thread(caller, thread_id)
        after = _decode_seq(cursor) if cursor else 0
        page = await svc.store.read_forward(caller.tenant_id, thread_id, after_seq=after, limit=limit)
        items = [message_view(m) for m in page if not m.meta.hidden_from_user]
        next_cursor = _encode_seq(page[-1].seq) if len(page) == limit else None
        return {"items": items, "nextCursor": next_cursor}

    @app.get(
        "/api/v1/agent/runs/{runId}/events",
        tags=["runs"],
        response_class=StreamingResponse,
        responses={200: {"content": {"text/event-stream": {}}, "description": "AG-UI events of the run"}},
    )
    async def run_events(
        request: Request,
        caller: Caller,
        runId: str,
        last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
        lastEventId: Annotated[str | None, Query(description="for clients that cannot set Last-Event-ID")] = None,
    ) -> StreamingResponse:
        intake.check_id("runId", runId, where="path")
        run = await svc.runs.get_visible_run(caller, runId)
        after = intake.check_stream_id(last_event_id or lastEventId or "0-0")
        deadline = request_deadline(request)
        return StreamingResponse(
            run_frames(svc.runs.tail_run(caller.tenant_id, run.run_id, after=after, deadline=deadline)),
            media_type="text/event-stream",
            headers=SSE_HEADERS,
        )

    @app.post("/api/v1/agent/runs/{runId}/cancel", tags=["runs"])
    async def cancel_run(caller: Caller, runId: str) -> dict[str, Any]:
        intake.check_id("runId", runId, where="path")
        run = await svc.runs.cancel(caller, runId)
        status = run.status.value if run.status.is_terminal else "cancelling"
        return {"runId": run.run_id, "status": status}

    @app.get("/api/v1/threads", tags=["threads"])
    async def list_threads(
        caller: Caller, limit: Annotated[int, Query(ge=1, le=100)] = 20, cursor: str | None = None
    ) -> dict[str, Any]:
        threads, next_cursor = await svc.store.list_threads(caller, limit=limit, cursor=cursor)
        body: dict[str, Any] = {
            "items": [
                {"threadId": t.thread_id, "createdAt": t.created_at.isoformat(), "updatedAt": t.updated_at.isoformat()}
                for t in threads
            ]
        }
        if next_cursor:
            body["nextCursor"] = next_cursor
        return body

    @app.get(
        "/api/v1/threads/{threadId}/events",
        tags=["threads"],
        response_class=StreamingResponse,
        responses={200: {"content": {"text/event-stream": {}}, "description": "events of every run of the thread"}},
    )
    async def thread_events(
        request: Request,
        caller: Caller,
        threadId: str,
        last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
        lastEventId: Annotated[str | None, Query()] = None,
    ) -> StreamingResponse:
        intake.check_id("threadId", threadId, where="path")
        await svc.store.get_thread(caller, threadId)
        after = intake.check_stream_id(last_event_id or lastEventId or "0-0")
        key = thread_stream_key(caller.tenant_id, threadId)
        return StreamingResponse(
            frames(svc.runs.tail(key, after=after, until_terminal=False, deadline=request_deadline(request))),
            media_type="text/event-stream",
            headers=SSE_HEADERS,
        )

    @app.get("/api/v1/threads/{threadId}/audit", tags=["threads"])
    async def thread_audit(
        caller: Caller, threadId: str, limit: Annotated[int, Query(ge=1, le=1000)] = 500
    ) -> dict[str, Any]:
        intake.check_id("threadId", threadId, where="path")
        if not caller.has_scope(AUDIT_SCOPE):
            raise Forbidden(f"the audit endpoint needs the {AUDIT_SCOPE} scope", code="missing_scope")
        await svc.store.get_thread(caller, threadId)
        messages = await svc.store.read_forward(caller.tenant_id, threadId, after_seq=0, limit=limit)
        records = await svc.store.list_for_thread(caller.tenant_id, threadId, limit=limit)
        runs = await svc.store.list_runs_for_thread(caller.tenant_id, threadId, limit=limit)
        return {
            "messages": [{**message_view(m), "hiddenFromUser": m.meta.hidden_from_user} for m in messages],
            "decisions": [r.model_dump(mode="json") for r in records],
            "runs": [
                {
                    "runId": r.run_id,
                    "status": r.status.value,
                    "origin": r.meta.origin.value,
                    "executor": r.meta.executor.value,
                    "executionProfileName": r.meta.execution_profile_name,
                    "hiddenFromUser": r.meta.hidden_from_user,
                    "usage": [u.model_dump() for u in r.usage],
                    "createdAt": r.created_at.isoformat(),
                    **({"errorCode": r.error_code} if r.error_code else {}),
                }
                for r in runs
            ],
        }

    app.openapi = lambda: _openapi_with_run_input(app)  # type: ignore[method-assign]
    return app


def _openapi_with_run_input(app: FastAPI) -> dict[str, Any]:
    """The generated schema, plus the AG-UI ``RunAgentInput`` the streaming route reads by hand."""
    if app.openapi_schema is None:
        from ag_ui.core import RunAgentInput
        from fastapi.openapi.utils import get_openapi

        schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        run_input = RunAgentInput.model_json_schema(by_alias=True, ref_template="#/components/schemas/{model}")
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        components.update(run_input.pop("$defs", {}))
        components["RunAgentInput"] = run_input
        app.openapi_schema = schema
    return app.openapi_schema
