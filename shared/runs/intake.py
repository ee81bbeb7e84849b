"""From an AG-UI ``RunAgentInput`` to what the backend stores and runs.

Clients send the whole conversation they hold on every run. Only ``user`` messages and ``tool`` messages (results
of front-end tool calls) are taken from them, and only those whose ids the thread does not have yet (the caller
filters with the store; tool results are then checked against the thread's pending calls by
:mod:`shared.runs.pending_calls`). Assistant, system and developer messages a client sends are never trusted,
because the stored thread is the source of truth for the model.

The tools a client declares (``RunAgentInput.tools``) are input too: :func:`client_tools` bounds their number,
size and nesting and checks each schema before any of it can reach the model.

A chat run reads its body once, with :func:`read_run_request`, into one :class:`RunRequest`: everything the run
takes from the request, checked; nothing after it goes back to the raw input.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from typing import Any

from ag_ui.core import RunAgentInput, ToolMessage
from pydantic import ValidationError

from shared.attachments.limits import AttachmentLimits
from shared.attachments.parts import PendingPart, read_parts, upgrade_legacy_parts
from shared.errors import InvalidRequest
from shared.executors.context import ResumeDecision
from shared.llm.types import ToolSpec
from shared.models import ExecutionMeta, Message, Role, digest
from shared.runs.approvals import resume_decisions
from shared.runs.branching import BranchRequest, branch_request
from shared.thread_state.limits import check_client_state
from shared.tools.arguments import check_declared_schemas, declared_tool_error

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:\-]{0,127}$")
MAX_USER_MESSAGE_CHARS = 32_000
MAX_CONTEXT_ITEMS = 20
MAX_TOOL_RESULT_CHARS = 16_000
"""Longest front-end tool result accepted (a longer one is refused with 422 ``tool_result_too_long``)."""
MAX_CLIENT_TOOLS = 32
MAX_CLIENT_TOOL_DESCRIPTION_CHARS = 1_000
_CLIENT_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@dataclass(frozen=True, slots=True)
class RunRequest:
    """A ``RunAgentInput`` body read once: what a chat run takes from it, each part checked."""

    thread_id: str
    run_id: str
    messages: tuple[Message, ...]
    """The user messages and front-end tool results, in the request's order (not yet filtered by the store)."""
    client_tools: tuple[ToolSpec, ...]
    context_notes: tuple[str, ...]
    client_state: dict[str, Any] | None
    body_digest: str
    forwarded_props: Any
    client_message_count: int
    """How many messages the client sent (the whole conversation it holds), for the audit summary."""
    resume: tuple[ResumeDecision, ...]
    """The answers to the thread's open approval interrupts (``shared.runs.approvals``), checked for shape only."""
    branch: BranchRequest = dataclasses.field(default_factory=BranchRequest)
    """A regenerate or an edit (``forwardedProps``; ``shared.runs.branching``)."""
    parts: dict[str, tuple[PendingPart, ...]] = dataclasses.field(default_factory=dict)
    """The images and files of each user message (by message id), checked but not yet stored
    (``shared.attachments.storage``)."""


def read_run_request(body: bytes, meta: ExecutionMeta, limits: AttachmentLimits | None = None) -> RunRequest:
    """Parse and check a ``RunAgentInput`` body (``InvalidRequest`` on the first problem), its messages stamped with
    ``meta``.

    A pipeline: the body is parsed, this module's own checks build each part, and the checks that belong to other
    packages (the declared tools' schemas, ``shared.tools.arguments``; the client's state,
    ``shared.thread_state.limits``) run last, on the parts already built."""
    run_input = parse_run_input(upgrade_legacy_parts(body))
    declared = client_tools(run_input)
    resume = resume_decisions(run_input)
    parts: dict[str, tuple[PendingPart, ...]] = {}
    return RunRequest(
        thread_id=run_input.thread_id,
        run_id=run_input.run_id,
        # AG-UI does not oblige a client to resend the conversation with a resume: its messages may be empty.
        messages=tuple(run_messages(run_input, meta, required=not resume, limits=limits, parts=parts)),
        context_notes=context_notes(run_input),
        body_digest=body_digest(run_input),
        forwarded_props=run_input.forwarded_props,
        client_message_count=len(run_input.messages),
        resume=resume,
        branch=branch_request(run_input.forwarded_props),
        client_tools=check_declared_schemas(declared),
        client_state=check_client_state(run_input.state),
        parts=parts,
    )


def parse_run_input(body: bytes) -> RunAgentInput:
    try:
        parsed = RunAgentInput.model_validate_json(body)
    except ValidationError as exc:
        raise InvalidRequest(
            "request body is not a valid RunAgentInput",
            code="invalid_request",
            details=[
                {"loc": ["body", *_wire_loc(err["loc"])], "msg": err["msg"], "type": err["type"]}
                for err in exc.errors(include_url=False, include_context=False, include_input=False)
            ],
        ) from exc
    for field, value in (("threadId", parsed.thread_id), ("runId", parsed.run_id)):
        check_id(field, value)
    return parsed


_ROLE_TAGS = frozenset({"user", "assistant", "system", "developer", "tool", "activity", "reasoning"})


_TYPE_TAG = re.compile(r"^(str|int|float|bool|none|list\[.*|dict\[.*|tagged-union\[.*|function-.*|json-or-python\[.*)$")


def _wire_loc(loc: tuple[int | str, ...]) -> list[int | str]:
    """pydantic names union members in an error's path (``messages.0.user.content.str``); clients name fields."""
    return [
        part
        for i, part in enumerate(loc)
        if not (
            isinstance(part, str)
            and (_TYPE_TAG.match(part) or (i > 0 and isinstance(loc[i - 1], int) and part in _ROLE_TAGS))
        )
    ]


def check_id(field: str, value: str, *, where: str = "body") -> None:
    if not _ID.match(value):
        raise InvalidRequest(
            f"{field} must be 1-128 characters of letters, digits, '_', '-', '.', ':'",
            details=[{"loc": [where, field], "msg": "invalid identifier", "type": "value_error"}],
        )


_STREAM_ID = re.compile(r"^\d{1,20}-\d{1,20}$")


def check_stream_id(value: str) -> str:
    """A ``Last-Event-ID`` must be a stream entry id (``<ms>-<seq>``) that this API handed out."""
    if not _STREAM_ID.match(value):
        raise InvalidRequest(
            "Last-Event-ID must be an event id from this stream",
            code="invalid_event_id",
            details=[{"loc": ["header", "Last-Event-ID"], "msg": "not a stream entry id", "type": "value_error"}],
        )
    return value


def body_digest(run_input: RunAgentInput) -> str:
    """A digest of the request's meaning, not its bytes: the same JSON re-serialised (key order, spacing) by a
    retrying client is the same request."""
    return digest(run_input.model_dump_json(by_alias=True, exclude_none=True))


def _text_of(
    content: Any, index: int, limits: AttachmentLimits | None = None
) -> tuple[str, tuple[PendingPart, ...]]:
    """A user message's text and its images and files (``shared.attachments.parts``); it must have one or the other."""
    pending: list[PendingPart] = []
    if isinstance(content, str):
        text = content
    else:
        text, pending = read_parts(list(content or []), index, limits or AttachmentLimits())
    if not text.strip() and not pending:
        raise InvalidRequest(
            "a user message must have text",
            details=[{"loc": ["body", "messages", index, "content"], "msg": "empty content", "type": "value_error"}],
        )
    return text, tuple(pending)


def run_messages(
    run_input: RunAgentInput,
    meta: ExecutionMeta,
    *,
    required: bool = True,
    limits: AttachmentLimits | None = None,
    parts: dict[str, tuple[PendingPart, ...]] | None = None,
) -> list[Message]:
    """The user messages and tool results of the input, in order (not yet filtered by the store).

    A run needs at least one of them (the user's message, or the result of a front-end tool call), unless it
    resumes (``required`` False).
    """
    tools = tool_results(run_input, meta)
    users = user_messages(run_input, meta, required=required and not tools, limits=limits, parts=parts)
    order = {getattr(getattr(m, "root", m), "id", None): i for i, m in enumerate(run_input.messages)}
    return sorted([*users, *tools], key=lambda m: order.get(m.id, 0))


def tool_results(run_input: RunAgentInput, meta: ExecutionMeta) -> list[Message]:
    """The ``role: tool`` messages of the input as tool messages of the thread, bounded in size."""
    out: list[Message] = []
    for index, raw in enumerate(run_input.messages):
        msg = getattr(raw, "root", raw)
        if not isinstance(msg, ToolMessage):
            continue
        check_id("messages[].id", msg.id)
        if not 0 < len(msg.tool_call_id) <= 256:
            # Only bounded, not pattern-checked: the id is the model provider's, and must only equal a pending one.
            raise InvalidRequest(
                "toolCallId must be 1-256 characters",
                details=[
                    {
                        "loc": ["body", "messages", index, "toolCallId"],
                        "msg": "invalid identifier",
                        "type": "value_error",
                    }
                ],
            )
        content = msg.content if isinstance(msg.content, str) else str(msg.content)
        if not content and msg.error:
            content = json.dumps({"error": {"code": "client_tool_error", "message": msg.error}})
        if len(content) > MAX_TOOL_RESULT_CHARS:
            raise InvalidRequest(
                f"the result of tool call {msg.tool_call_id!r} is longer than {MAX_TOOL_RESULT_CHARS} characters",
                code="tool_result_too_long",
                details=[{"loc": ["body", "messages", index, "content"], "msg": "too long", "type": "value_error"}],
            )
        out.append(
            Message(
                id=msg.id,
                thread_id=run_input.thread_id,
                role=Role.TOOL,
                content=content,
                tool_call_id=msg.tool_call_id,
                run_id=run_input.run_id,
                meta=meta,
                flags={"frontend_result": True},
            )
        )
    return out


def user_messages(
    run_input: RunAgentInput,
    meta: ExecutionMeta,
    *,
    required: bool = True,
    limits: AttachmentLimits | None = None,
    parts: dict[str, tuple[PendingPart, ...]] | None = None,
) -> list[Message]:
    """The user messages of the input, in order, as messages of the thread (not yet filtered by the store); each
    one's images and files go to ``parts``, by message id."""
    out: list[Message] = []
    for index, raw in enumerate(run_input.messages):
        msg = getattr(raw, "root", raw)
        if getattr(msg, "role", None) != "user":
            continue
        check_id("messages[].id", msg.id)
        text, pending = _text_of(msg.content, index, limits)
        if pending and parts is not None:
            parts[msg.id] = pending
        if len(text) > MAX_USER_MESSAGE_CHARS:
            raise InvalidRequest(
                f"a user message is longer than {MAX_USER_MESSAGE_CHARS} characters",
                code="message_too_long",
                details=[{"loc": ["body", "messages"], "msg": "message too long", "type": "value_error"}],
            )
        out.append(
            Message(
                id=msg.id,
                thread_id=run_input.thread_id,
                role=Role.USER,
                content=text,
                parts=tuple(p.part for p in pending),
                run_id=run_input.run_id,
                meta=meta,
            )
        )
    if not out and required:
        raise InvalidRequest(
            "messages must contain at least one user message",
            details=[{"loc": ["body", "messages"], "msg": "no user message", "type": "value_error"}],
        )
    return out


def client_tool_names(run_input: RunAgentInput) -> frozenset[str]:
    return frozenset(t.name for t in run_input.tools or [])


def client_tools(run_input: RunAgentInput) -> tuple[ToolSpec, ...]:
    """The front-end tools the client declares, checked: a bad one is a 422 that names it.

    Limits: at most ``MAX_CLIENT_TOOLS`` tools with unique, well-formed names; each description at most
    ``MAX_CLIENT_TOOL_DESCRIPTION_CHARS``. Their ``parameters`` are checked after, by
    :func:`shared.tools.arguments.check_declared_schemas`.
    Whether a tool is offered to the model is decided later, by the profile (:class:`shared.tool_gate.ToolGate`).
    """
    declared = run_input.tools or []
    if len(declared) > MAX_CLIENT_TOOLS:
        raise InvalidRequest(
            f"at most {MAX_CLIENT_TOOLS} tools may be declared",
            code="invalid_tool",
            details=[{"loc": ["body", "tools"], "msg": "too many tools", "type": "value_error"}],
        )
    seen: set[str] = set()
    out: list[ToolSpec] = []
    for index, tool in enumerate(declared):
        name = tool.name
        shown = name[:64]
        if not _CLIENT_TOOL_NAME.match(name):
            raise declared_tool_error(index, shown, "name", "a tool name must be 1-64 letters, digits, '_' or '-'")
        if name in seen:
            raise declared_tool_error(index, name, "name", "declared twice")
        seen.add(name)
        if len(tool.description or "") > MAX_CLIENT_TOOL_DESCRIPTION_CHARS:
            raise declared_tool_error(
                index, name, "description", f"description longer than {MAX_CLIENT_TOOL_DESCRIPTION_CHARS} characters"
            )
        schema = tool.parameters if tool.parameters is not None else {"type": "object", "properties": {}}
        out.append(ToolSpec(name=name, description=tool.description or "", parameters=schema))
    return tuple(out)


def context_notes(run_input: RunAgentInput) -> tuple[str, ...]:
    return tuple(f"{c.description}: {c.value}" for c in (run_input.context or [])[:MAX_CONTEXT_ITEMS])
