"""The caller's threads under ``/api/v1/threads``: the list, a thread's history, its runs, its live events and its
audit view.

HTTP to ``shared.threads.ThreadService`` calls and back; the views here are the API's camelCase shapes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, Query
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, model_validator

from functions.agent_api.deps import Caller, Deadline, Statuses, Threads
from functions.agent_api.run_views import run_status_view
from functions.agent_api.sse import SSE_HEADERS, frames
from shared.attachments.part_urls import part_url
from shared.errors import InvalidRequest
from shared.models import PREVIOUS, Feedback, Message, Run, Thread
from shared.runs import intake
from shared.thread_fields import CLIENT_TITLE, METADATA_KEYS, check_changes, check_value
from shared.thread_search import ThreadCriteria
from shared.threads import HistoryPage

router = APIRouter(prefix="/api/v1/threads", tags=["threads"])


def message_view(
    msg: Message, siblings: tuple[str, ...] = (), part_urls: Mapping[str, str] | None = None
) -> dict[str, Any]:
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
    if msg.parent_id != PREVIOUS:  # unresolved only for a message stored before threads were trees, unmigrated
        view["parentId"] = msg.parent_id
    if siblings:
        view["siblingIds"] = list(siblings)
    if msg.parts:
        view["parts"] = [part_view(msg, n, part_urls or {}) for n in range(len(msg.parts))]
    if msg.feedback is not None:
        view["feedback"] = feedback_view(msg.feedback)
    if msg.flags.get("partial"):
        view["partial"] = True
        ended_by = msg.flags.get("ended_by")
        if isinstance(ended_by, str):
            view["endedBy"] = ended_by
    return view


def part_view(msg: Message, n: int, part_urls: Mapping[str, str]) -> dict[str, Any]:
    """A stored image or file of a message: its type and name, and a URL to read it (a client's URL source is its
    own; a stored part's is its presigned GET when the store made one (on AWS), else this API's parts route, behind
    the caller's token)."""
    part = msg.parts[n]
    view: dict[str, Any] = {"type": part.kind, "mimeType": part.mime_type, "url": part_url(msg, n, part_urls)}
    for name, value in (
        ("filename", part.filename),
        ("size", part.size),
        ("width", part.width),
        ("height", part.height),
    ):
        if value is not None:
            view[name] = value
    return view


def feedback_view(feedback: Feedback) -> dict[str, Any]:
    view: dict[str, Any] = {"score": feedback.score, "createdAt": feedback.created_at.isoformat()}
    if feedback.comment:
        view["comment"] = feedback.comment
    if feedback.tags:
        view["tags"] = list(feedback.tags)
    return view


def run_view(run: Run) -> dict[str, Any]:
    return {
        "runId": run.run_id,
        "status": run.status.value,
        "origin": run.meta.origin.value,
        "executor": run.meta.executor.value,
        "executionProfileName": run.meta.execution_profile_name,
        "hiddenFromUser": run.meta.hidden_from_user,
        "usage": [u.model_dump() for u in run.usage],
        "createdAt": run.created_at.isoformat(),
        **({"errorCode": run.error_code} if run.error_code else {}),
    }


def history_view(page: HistoryPage) -> dict[str, Any]:
    return {
        "items": [message_view(m, page.siblings.get(m.id, ()), page.part_urls) for m in page.messages],
        "nextCursor": page.next_cursor,
        "leafMessageId": page.leaf_id,
        "state": page.state.state,
        "stateVersion": page.state.version,
    }


@router.get("/{threadId}/history")
async def history(
    caller: Caller,
    threads: Threads,
    threadId: str,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: str | None = None,
    leaf: str | None = None,
) -> dict[str, Any]:
    intake.check_id("threadId", threadId, where="path")
    if leaf is not None:
        intake.check_id("leaf", leaf, where="query")
    return history_view(await threads.history(caller, threadId, limit=limit, cursor=cursor, leaf=leaf))


class BranchSwitch(BaseModel):
    """The body of ``PUT /threads/{threadId}/branch``: exactly one of ``leafMessageId`` (the branch ends there) and
    ``throughMessageId`` (the branch goes through it, on to its newest descendant: a sibling a user picked)."""

    model_config = ConfigDict(extra="ignore")

    leaf_message_id: str | None = Field(default=None, alias="leafMessageId")
    through_message_id: str | None = Field(default=None, alias="throughMessageId")

    @model_validator(mode="after")
    def _exactly_one(self) -> BranchSwitch:
        if (self.leaf_message_id is None) == (self.through_message_id is None):
            raise ValueError("send exactly one of leafMessageId and throughMessageId")
        return self


@router.put("/{threadId}/branch")
async def switch_branch(
    caller: Caller,
    threads: Threads,
    threadId: str,
    body: BranchSwitch,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> dict[str, Any]:
    """Make the branch that ends at ``leafMessageId`` the thread's current one; the response is its history."""
    intake.check_id("threadId", threadId, where="path")
    field, message_id = (
        ("leafMessageId", body.leaf_message_id)
        if body.leaf_message_id is not None
        else ("throughMessageId", body.through_message_id or "")
    )
    intake.check_id(field, message_id)
    through = field == "throughMessageId"
    return history_view(await threads.switch_branch(caller, threadId, message_id, limit=limit, through=through))


def thread_view(thread: Thread) -> dict[str, Any]:
    """A thread as the list, ``GET /threads/{id}`` and ``PATCH`` return it; unset optional fields are omitted."""
    view: dict[str, Any] = {
        "threadId": thread.thread_id,
        "createdAt": thread.created_at.isoformat(),
        "updatedAt": thread.updated_at.isoformat(),
        "metadata": thread.metadata,
        "archived": thread.archived,
        "pinned": thread.pinned,
        "messageCount": thread.message_count,
    }
    if thread.title is not None:
        view["title"] = thread.title
        view["titleSource"] = thread.title_source or CLIENT_TITLE
    if thread.last_message is not None:
        last = thread.last_message
        view["lastMessage"] = {"role": last.role, "preview": last.preview, "createdAt": last.at.isoformat()}
    return view


@router.get("/{threadId}")
async def get_thread(caller: Caller, threads: Threads, threadId: str) -> dict[str, Any]:
    intake.check_id("threadId", threadId, where="path")
    return thread_view(await threads.get(caller, threadId))


@router.get("/{threadId}/runs")
async def thread_runs(
    caller: Caller,
    statuses: Statuses,
    threadId: str,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    cursor: Annotated[str | None, Query(max_length=1024)] = None,
) -> dict[str, Any]:
    """The thread's runs, newest first, each as its status document without ``messageIds``."""
    intake.check_id("threadId", threadId, where="path")
    page = await statuses.thread_runs(caller, threadId, limit=limit, cursor=cursor)
    body: dict[str, Any] = {"items": [run_status_view(r) for r in page.items]}
    if page.next_cursor:
        body["nextCursor"] = page.next_cursor
    return body


@router.patch("/{threadId}")
async def update_thread(caller: Caller, threads: Threads, threadId: str, body: dict[str, Any]) -> dict[str, Any]:
    """Any of ``title`` (null or empty: removed), ``metadata`` (merged; a null value removes the key), ``archived``
    and ``pinned``; the thread as changed. Checked by ``shared.thread_fields.check_changes`` (422)."""
    intake.check_id("threadId", threadId, where="path")
    return thread_view(await threads.update(caller, threadId, check_changes(body)))


@router.get("")
async def list_threads(
    caller: Caller, threads: Threads, limit: Annotated[int, Query(ge=1, le=100)] = 20, cursor: str | None = None
) -> dict[str, Any]:
    items, next_cursor = await threads.list(caller, limit=limit, cursor=cursor)
    body: dict[str, Any] = {"items": [thread_view(t) for t in items]}
    if next_cursor:
        body["nextCursor"] = next_cursor
    return body


class ThreadSearch(BaseModel):
    """The body of ``POST /threads/search`` (see api-endpoints.md §4)."""

    model_config = ConfigDict(extra="forbid")

    query: str | None = Field(default=None, max_length=200)
    metadata: dict[str, str | int | float | bool] = Field(default_factory=dict)
    archived: bool | None = None
    pinned: bool | None = None
    limit: int = Field(default=20, ge=1, le=100)
    cursor: str | None = None


@router.post("/search")
async def search_threads(caller: Caller, threads: Threads, body: ThreadSearch) -> dict[str, Any]:
    """The caller's threads matching every given criterion, most recent first; archived ones too unless
    ``archived`` says otherwise. A page may hold fewer than ``limit`` threads and still have a ``nextCursor``."""
    if len(body.metadata) > METADATA_KEYS:
        raise InvalidRequest(f"metadata holds at most {METADATA_KEYS} pairs", code="invalid_metadata")
    for value in body.metadata.values():
        check_value(value)
    criteria = ThreadCriteria(query=body.query, metadata=body.metadata, archived=body.archived, pinned=body.pinned)
    items, next_cursor = await threads.search(caller, criteria, limit=body.limit, cursor=body.cursor)
    return {"items": [thread_view(t) for t in items], **({"nextCursor": next_cursor} if next_cursor else {})}


class FeedbackBody(BaseModel):
    """The body of ``POST .../messages/{messageId}/feedback``: thumbs up (1) or down (-1), a comment, tags."""

    model_config = ConfigDict(extra="forbid")

    score: Literal[1, -1]
    comment: str | None = Field(default=None, max_length=2000)
    tags: list[Annotated[str, Field(min_length=1, max_length=40)]] = Field(default_factory=list, max_length=10)


@router.post("/{threadId}/messages/{messageId}/feedback")
async def give_feedback(
    caller: Caller, threads: Threads, threadId: str, messageId: str, body: FeedbackBody
) -> dict[str, Any]:
    """The caller's feedback on an answer of their thread; a new one replaces theirs. 200 with the feedback."""
    intake.check_id("threadId", threadId, where="path")
    intake.check_id("messageId", messageId, where="path")
    feedback = Feedback(score=body.score, comment=body.comment or None, tags=tuple(body.tags), user_id=caller.user_id)
    await threads.give_feedback(caller, threadId, messageId, feedback)
    return {"messageId": messageId, "feedback": feedback_view(feedback)}


@router.get("/{threadId}/messages/{messageId}/parts/{n}")
async def message_part(caller: Caller, threads: Threads, threadId: str, messageId: str, n: int) -> Response:
    """The bytes of a stored image or file of a message of the caller's thread (another user's: 404)."""
    intake.check_id("threadId", threadId, where="path")
    intake.check_id("messageId", messageId, where="path")
    data, mime = await threads.message_part(caller, threadId, messageId, n)
    return Response(
        data, media_type=mime, headers={"Cache-Control": "private, max-age=900", "X-Content-Type-Options": "nosniff"}
    )


@router.delete("/{threadId}/messages/{messageId}/feedback", status_code=204)
async def remove_feedback(caller: Caller, threads: Threads, threadId: str, messageId: str) -> Response:
    intake.check_id("threadId", threadId, where="path")
    intake.check_id("messageId", messageId, where="path")
    await threads.give_feedback(caller, threadId, messageId, None)
    return Response(status_code=204)


@router.get(
    "/{threadId}/events",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/event-stream": {}}, "description": "events of every run of the thread"}},
)
async def thread_events(
    caller: Caller,
    deadline: Deadline,
    threads: Threads,
    threadId: str,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
    lastEventId: Annotated[str | None, Query()] = None,
    snapshot: Annotated[Literal["messages"] | None, Query()] = None,
) -> StreamingResponse:
    intake.check_id("threadId", threadId, where="path")
    entries = await threads.events(
        caller, threadId, after=last_event_id or lastEventId, deadline=deadline, snapshot=snapshot == "messages"
    )
    return StreamingResponse(frames(entries), media_type="text/event-stream", headers=SSE_HEADERS)


@router.get("/{threadId}/audit")
async def thread_audit(
    caller: Caller, threads: Threads, threadId: str, limit: Annotated[int, Query(ge=1, le=1000)] = 500
) -> dict[str, Any]:
    intake.check_id("threadId", threadId, where="path")
    audit = await threads.audit(caller, threadId, limit=limit)
    return {
        "messages": [{**message_view(m), "hiddenFromUser": m.meta.hidden_from_user} for m in audit.messages],
        "decisions": [r.model_dump(mode="json") for r in audit.decisions],
        "runs": [run_view(r) for r in audit.runs],
    }
