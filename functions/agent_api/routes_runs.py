"""``POST /api/v1/agent`` (start a run and follow it), and a run's status, events and cancel under
``/api/v1/agent/runs``.

Every response that follows a run tails its stream (``shared.runs.tailing``); the response of the request that
started it ends only once the run has settled (``OwnedRunResponse``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from functions.agent_api.deps import Caller, Chat, Deadline, Runs, Statuses, services_of
from functions.agent_api.run_views import queued_run_view, run_status_view
from functions.agent_api.sse import PING, SSE_HEADERS, OwnedRunResponse, frame
from shared.errors import NotFound, PayloadTooLarge
from shared.event_json import dumps
from shared.ports import StreamEntry
from shared.runs import intake
from shared.runs.background import BackgroundAccepted
from shared.runs.queueing import Enqueuing, QueuedTurn
from shared.runs.service import RunService
from shared.runs.tailing import TAIL_DEADLINE_MARGIN_S

router = APIRouter(prefix="/api/v1/agent", tags=["runs"])


async def read_limited_body(request: Request) -> bytes:
    """The request body, refused with 413 once it exceeds ``max_body_bytes`` (declared or read)."""
    limit = services_of(request).settings.max_body_bytes
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
            yield f"data: {entry.json if entry.json is not None else dumps(entry.event)}\n\n"
        else:
            yield PING if entry is None else frame(entry)


Body = Annotated[bytes, Depends(read_limited_body)]


@router.post(
    "",
    response_class=StreamingResponse,
    responses={
        200: {"content": {"text/event-stream": {}}, "description": "AG-UI events"},
        202: {"description": "a background run accepted (``forwardedProps.background: true``)"},
    },
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/RunAgentInput"}}},
        }
    },
)
async def run_agent(
    request: Request, caller: Caller, deadline: Deadline, body: Body, chat: Chat, runs: Runs
) -> Response:
    started = await chat.start(caller, body, deadline=deadline)
    if isinstance(started, BackgroundAccepted):
        return accepted_response(started)
    if isinstance(started, QueuedTurn):
        return queued_response(request, caller, started, deadline, runs)
    run_id, thread_id = started.run.run_id, started.run.thread_id

    async def settled() -> None:
        await runs.wait_settled(caller.tenant_id, run_id)
        if chat.enqueuing is not None and started.created:
            # The thread is free again: a queued run whose request has gone is started here (shared.runs.queueing).
            queue = chat.enqueuing.thread_queue(caller.tenant_id, thread_id, deadline)
            until = chat.enqueuing.waiter_until(deadline or runs.invocation_deadline())
            await queue.hand_over(until=until, wait_settled=runs.wait_settled)

    return OwnedRunResponse(
        run_frames(runs.tail_run(caller.tenant_id, run_id, deadline=deadline)),
        settled=settled,
        media_type="text/event-stream",
        headers=SSE_HEADERS,
    )


def accepted_response(accepted: BackgroundAccepted) -> JSONResponse:
    """``202``: where to read the run's status and follow its events (``Location``: the status)."""
    status_url = f"{router.prefix}/runs/{accepted.run_id}"
    body = {
        "runId": accepted.run_id,
        "threadId": accepted.thread_id,
        "status": accepted.status,
        "statusUrl": status_url,
        "eventsUrl": f"{status_url}/events",
    }
    return JSONResponse(body, status_code=202, headers={"Location": status_url})


def queued_response(
    request: Request, caller: Caller, turn: QueuedTurn, deadline: float | None, runs: RunService
) -> StreamingResponse:
    """A queued run's response: pings while it waits, then its events; it ends once the run has settled, even when
    the client left (the run was accepted, so it runs)."""

    def tail(tenant_id: str, run_id: str, at: float | None) -> AsyncIterator[StreamEntry | None]:
        return runs.tail_run(tenant_id, run_id, deadline=at)

    ping_s = services_of(request).settings.sse_ping_interval_s
    return OwnedRunResponse(
        run_frames(turn.entries(tail, deadline=deadline, ping_interval_s=ping_s)),
        settled=lambda: turn.settled(runs.wait_settled),
        media_type="text/event-stream",
        headers=SSE_HEADERS,
    )


@router.get(
    "/runs/{runId}/events",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/event-stream": {}}, "description": "AG-UI events of the run"}},
)
async def run_events(
    request: Request,
    chat: Chat,
    caller: Caller,
    deadline: Deadline,
    runs: Runs,
    runId: str,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
    lastEventId: Annotated[str | None, Query(description="for clients that cannot set Last-Event-ID")] = None,
) -> StreamingResponse:
    intake.check_id("runId", runId, where="path")
    after = intake.check_stream_id(last_event_id or lastEventId or "0-0")
    try:
        run = await runs.get_visible_run(caller, runId)
    except NotFound:
        # A run queued with the enqueue strategy (shared.runs.queueing) exists only in its thread's queue until
        # its turn: pings until it starts, then its events.
        if chat.enqueuing is None or await chat.enqueuing.queued_run(caller, runId) is None:
            raise
        return queued_events(request, caller, runId, deadline, chat.enqueuing, runs)
    return StreamingResponse(
        run_frames(runs.tail_run(caller.tenant_id, run.run_id, after=after, deadline=deadline)),
        media_type="text/event-stream",
        headers=SSE_HEADERS,
    )


def queued_events(
    request: Request, caller: Caller, run_id: str, deadline: float | None, queue: Enqueuing, runs: RunService
) -> StreamingResponse:
    """The events of a run still queued, for a reader: pings until it starts, then its events."""

    def tail(tenant_id: str, tailed: str, _: float | None) -> AsyncIterator[StreamEntry | None]:
        return runs.tail_run(tenant_id, tailed, deadline=deadline)

    ping_s = services_of(request).settings.sse_ping_interval_s
    ends_at = (deadline or runs.invocation_deadline()) - TAIL_DEADLINE_MARGIN_S
    return StreamingResponse(
        run_frames(queue.follow(caller, run_id, tail, deadline=ends_at, ping_interval_s=ping_s)),
        media_type="text/event-stream",
        headers=SSE_HEADERS,
    )


@router.get("/runs/{runId}")
async def run_status(caller: Caller, chat: Chat, statuses: Statuses, runId: str) -> dict[str, Any]:
    """The caller's run, streamed or not: status, timestamps, usage, outcome, the ids of the messages it stored."""
    intake.check_id("runId", runId, where="path")
    try:
        return run_status_view(await statuses.report(caller, runId))
    except NotFound:
        # A run queued with the enqueue strategy has no ledger record until its turn (shared.runs.queueing).
        queued = await chat.enqueuing.queued_run(caller, runId) if chat.enqueuing is not None else None
        if queued is None:
            raise
        return queued_run_view(runId, queued.thread_id)


@router.post("/runs/{runId}/cancel")
async def cancel_run(caller: Caller, chat: Chat, runs: Runs, runId: str) -> dict[str, Any]:
    intake.check_id("runId", runId, where="path")
    try:
        run = await runs.cancel(caller, runId)
    except NotFound:
        # A queued run (a background run not started yet, or one queued with the enqueue strategy) is taken out
        # of its queue and recorded cancelled; one that started meanwhile is cancelled as any run.
        if chat.enqueuing is None or not await chat.enqueuing.cancel_queued(caller, runId):
            run = await runs.cancel(caller, runId)
        else:
            return {"runId": runId, "status": "cancelled"}
    status = run.status.value if run.status.is_terminal else "cancelling"
    return {"runId": run.run_id, "status": status}
