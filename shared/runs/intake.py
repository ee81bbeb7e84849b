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


def _text_of(content: Any, index: int) -> str:
    if isinstance(content, str):
        text = content
    else:
        parts: list[str] = []
        for position, part in enumerate(content or []):
            kind = getattr(part, "type", None)
            if kind != "text":
                raise InvalidRequest(
                    f"content parts of type {kind!r} are not supported; send text",
                    code="invalid_request",
                    details=[
                        {
                            "loc": ["body", "messages", index, "content", position, "type"],
                            "msg": "only text parts are supported",
                            "type": "value_error",
                        }
                    ],
                )
            parts.append(str(getattr(part, "text", "")))
        text = "\n".join(parts)
    if not text.strip():
        raise InvalidRequest(
            "a user message must have text",
            details=[{"loc": ["body", "messages", index, "content"], "msg": "empty content", "type": "value_error"}],
        )
    return text


def user_messages(run_input: RunAgentInput, meta: ExecutionMeta) -> list[Message]:
    """The user messages of the input, in order, as messages of the thread (not yet filtered by the store)."""
    out: list[Message] = []
    for index, raw in enumerate(run_input.messages):
        msg = getattr(raw, "root", raw)
        if getattr(msg, "role", None) != "user":
            continue
        check_id("messages[].id", msg.id)
        text = _text_of(msg.content, index)
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
