"""From an AG-UI ``RunAgentInput`` to what the backend stores and runs.

Clients send the whole conversation they hold on every run. Only ``user`` messages are taken from them (and only
those whose ids the thread does not have yet: the caller filters with the store); assistant, system and developer
messages a client sends are never trusted, because the stored thread is the source of truth for the model.
"""

from __future__ import annotations

import re
from typing import Any

from ag_ui.core import RunAgentInput
from pydantic import ValidationError

from shared.errors import InvalidRequest
from shared.models import ExecutionMeta, Message, Role, digest

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:\-]{0,127}$")
MAX_USER_MESSAGE_CHARS = 32_000
MAX_CONTEXT_ITEMS = 20


def parse_run_input(body: bytes) -> RunAgentInput:
    try:
        parsed = RunAgentInput.model_validate_json(body)
    except ValidationError as exc:
        raise InvalidRequest(
            "request body is not a valid RunAgentInput",
            code="invalid_request",
            details=[
                {"loc": list(err["loc"]), "msg": err["msg"], "type": err["type"]}
                for err in exc.errors(include_url=False, include_context=False, include_input=False)
            ],
        ) from exc
    for field, value in (("threadId", parsed.thread_id), ("runId", parsed.run_id)):
        check_id(field, value)
    return parsed


def check_id(field: str, value: str) -> None:
    if not _ID.match(value):
        raise InvalidRequest(
            f"{field} must be 1-128 characters of letters, digits, '_', '-', '.', ':'",
            details=[{"loc": ["body", field], "msg": "invalid identifier", "type": "value_error"}],
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


def body_digest(body: bytes) -> str:
    return digest(body.decode("utf-8", "replace"))


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for part in content or []:
        text = getattr(part, "text", None)
        if isinstance(text, str):
            parts.append(text)
    return "\n".join(parts)


def user_messages(run_input: RunAgentInput, meta: ExecutionMeta) -> list[Message]:
    """The user messages of the input, in order, as messages of the thread (not yet filtered by the store)."""
    out: list[Message] = []
    for raw in run_input.messages:
        msg = getattr(raw, "root", raw)
        if getattr(msg, "role", None) != "user":
            continue
        check_id("messages[].id", msg.id)
        text = _text_of(msg.content)
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
                run_id=run_input.run_id,
                meta=meta,
            )
        )
    if not out:
        raise InvalidRequest(
            "messages must contain at least one user message",
            details=[{"loc": ["body", "messages"], "msg": "no user message", "type": "value_error"}],
        )
    return out


def client_tool_names(run_input: RunAgentInput) -> frozenset[str]:
    return frozenset(t.name for t in run_input.tools or [])


def context_notes(run_input: RunAgentInput) -> tuple[str, ...]:
    return tuple(f"{c.description}: {c.value}" for c in (run_input.context or [])[:MAX_CONTEXT_ITEMS])
