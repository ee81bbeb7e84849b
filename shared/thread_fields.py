"""A thread's product fields: the preview of its last visible message, its title and its metadata, with their bounds.

Both stores (in memory and DynamoDB) derive ``lastMessage`` here, on the write that stores the messages, so the
list shows a preview without reading a message; and a ``PATCH`` is checked here before a store sees it. The bounds
follow OpenAI's metadata (16 pairs, keys up to 64 characters, values up to 512): large enough to tag a thread,
small enough that a thread item (and its list entry, which projects them) stays far below DynamoDB's item size.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from shared.errors import InvalidRequest, NotFound
from shared.models import LastMessage, Message, Role, Thread

PREVIEW_CHARS = 120
TITLE_CHARS = 200
CLIENT_TITLE = "client"
"""``Thread.title_source`` of a title the client set (or removed): a generated title is never written after it."""
GENERATED_TITLE = "generated"
"""``Thread.title_source`` of a title written by the title job (``shared.titles``)."""
METADATA_KEYS = 16
METADATA_KEY_CHARS = 64
METADATA_VALUE_CHARS = 512
MAX_NUMBER = 2**53
"""The largest metadata number: exact in JavaScript, far inside DynamoDB's number range."""

Scalar = str | int | float | bool


def preview(text: str, limit: int = PREVIEW_CHARS) -> str:
    """``text`` on one line, cut at a word boundary to at most ``limit`` characters (an ellipsis when cut)."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    cut = flat[: limit - 1]
    space = cut.rfind(" ")
    if space > limit // 2:
        cut = cut[:space]
    return cut.rstrip() + "…"


def last_visible(messages: Sequence[Message]) -> tuple[LastMessage, int] | None:
    """The last message of ``messages`` (numbered, oldest first) a user sees in the history, as a preview, and its
    seq (the thread's message count as of it); None when none is visible (tool results, hidden runs, empty tool
    calls)."""
    for msg in reversed(messages):
        if msg.meta.hidden_from_user or msg.role not in (Role.USER, Role.ASSISTANT) or not msg.content.strip():
            continue
        return LastMessage(role=msg.role.value, preview=preview(msg.content), at=msg.created_at), msg.seq
    return None


@dataclass(frozen=True)
class ThreadChanges:
    """A checked ``PATCH``: only the fields given (``title`` None: unchanged; ``clear_title``: removed);
    ``metadata``: keys to set, a None value removing the key."""

    title: str | None = None
    clear_title: bool = False
    metadata: dict[str, Scalar | None] = field(default_factory=dict)
    archived: bool | None = None
    pinned: bool | None = None

    @property
    def fields(self) -> list[str]:
        """The names of the fields this change touches (what the audit records)."""
        touched = {
            "title": self.title is not None or self.clear_title,
            "metadata": bool(self.metadata),
            "archived": self.archived is not None,
            "pinned": self.pinned is not None,
        }
        return [name for name, yes in touched.items() if yes]


def check_changes(body: dict[str, Any]) -> ThreadChanges:
    """The changes a ``PATCH`` body asks for; ``InvalidRequest`` (422) for an unknown field, a wrong type or a size
    over the bounds."""
    unknown = set(body) - {"title", "metadata", "archived", "pinned"}
    if unknown:
        raise InvalidRequest(f"unknown fields: {', '.join(sorted(unknown))}", code="invalid_thread_fields")
    title = body.get("title")
    if title is not None and (not isinstance(title, str) or len(title) > TITLE_CHARS):
        raise InvalidRequest(
            f"title must be a string of at most {TITLE_CHARS} characters", code="invalid_thread_fields"
        )
    metadata = body.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise InvalidRequest("metadata must be an object", code="invalid_thread_fields")
    for key, value in metadata.items():
        if not key or len(key) > METADATA_KEY_CHARS:
            raise InvalidRequest(f"metadata keys are 1 to {METADATA_KEY_CHARS} characters", code="invalid_metadata")
        check_value(value)
    flags = {name: body.get(name) for name in ("archived", "pinned")}
    for name, value in flags.items():
        if value is not None and not isinstance(value, bool):
            raise InvalidRequest(f"{name} must be a boolean", code="invalid_thread_fields")
    stripped = title.strip() if isinstance(title, str) else None
    return ThreadChanges(
        title=stripped or None,
        clear_title="title" in body and not stripped,
        metadata=metadata,
        archived=flags["archived"],
        pinned=flags["pinned"],
    )


def check_value(value: object) -> None:
    """A metadata value: a scalar (a string of at most ``METADATA_VALUE_CHARS``), or None (remove the key)."""
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, int | float):
        if not (abs(value) <= MAX_NUMBER and value == value):  # a JSON-safe number DynamoDB can store
            raise InvalidRequest(f"metadata numbers are at most {MAX_NUMBER} in size", code="invalid_metadata")
        return
    if not isinstance(value, str) or len(value) > METADATA_VALUE_CHARS:
        raise InvalidRequest(
            f"metadata values are scalars, strings of at most {METADATA_VALUE_CHARS} characters",
            code="invalid_metadata",
        )


def merge_metadata(current: dict[str, Scalar], changes: dict[str, Scalar | None]) -> dict[str, Scalar]:
    """``current`` with ``changes`` merged (None removes a key); ``InvalidRequest`` over ``METADATA_KEYS`` pairs."""
    merged = dict(current)
    for key, value in changes.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    if len(merged) > METADATA_KEYS:
        raise InvalidRequest(f"metadata holds at most {METADATA_KEYS} pairs", code="invalid_metadata")
    return merged


def apply_changes(thread: Thread, changes: ThreadChanges) -> Thread:
    """``thread`` as ``changes`` leave it. A title set here is the client's, and so is a title removed here (the
    source stays ``client`` without a text): a generated one never replaces either."""
    update: dict[str, Any] = {"metadata": merge_metadata(thread.metadata, changes.metadata)}
    if changes.title is not None:
        update |= {"title": changes.title, "title_source": CLIENT_TITLE}
    elif changes.clear_title:
        update |= {"title": None, "title_source": CLIENT_TITLE}
    if changes.archived is not None:
        update["archived"] = changes.archived
    if changes.pinned is not None:
        update["pinned"] = changes.pinned
    return thread.model_copy(update=update)


def may_generate_title(thread: Thread) -> bool:
    """Whether a generated title may be written: the thread has no title, and its client never set or removed one."""
    return thread.title is None and thread.title_source is None


def check_answer(message: Message) -> None:
    """Feedback is on an answer the user sees: a hidden run's message is unknown to them (NotFound), a question
    or a tool result is not an answer (422 ``not_an_answer``)."""
    if message.meta.hidden_from_user:
        raise NotFound("message not found")
    if message.role != Role.ASSISTANT:
        raise InvalidRequest("feedback is given on an assistant message", code="not_an_answer")
