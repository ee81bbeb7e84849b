"""A thread's stored conversation as one AG-UI ``MESSAGES_SNAPSHOT`` (``GET /threads/{id}/events?snapshot=messages``).

A client that reconnects, or opens the thread on a second device, gets the visible conversation in one event,
then follows the thread's live events from the point the snapshot was taken (``shared.threads``). Messages of
hidden runs (memory, automation) are never in it, nor are stored system notes: what the history API shows.

A user message with images or files has AG-UI 1.0 content parts: its text, then one ``image`` / ``document`` /
``audio`` / ``video`` part per stored part with a ``url`` source, the same URL the history gives
(``shared.attachments.part_urls``), never the bytes; the part's ``metadata`` holds its ``filename``, ``size``,
``width`` and ``height`` when known, as the history's part does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ag_ui.core import (
    AssistantMessage,
    AudioInputPart,
    DocumentInputPart,
    FunctionCall,
    ImageInputPart,
    InputContentUrlSource,
    MessagesSnapshotEvent,
    TextInputContent,
    ToolCall,
    ToolMessage,
    UserMessage,
    VideoInputPart,
)

from shared.attachments.part_urls import part_url
from shared.models import Message, Role

_PART_TYPES = {"image": ImageInputPart, "document": DocumentInputPart, "audio": AudioInputPart, "video": VideoInputPart}

SNAPSHOT_MESSAGES = 200
"""The newest visible messages a snapshot holds (the history API pages through older ones)."""


def agui_message(msg: Message, presigned: Mapping[str, str] | None = None) -> Any:
    """One stored message in AG-UI message form; None for a role the snapshot leaves out."""
    if msg.role is Role.USER:
        return UserMessage(id=msg.id, content=user_content(msg, presigned))
    if msg.role is Role.ASSISTANT:
        calls = [
            ToolCall(id=c.id, type="function", function=FunctionCall(name=c.name, arguments=c.arguments))
            for c in msg.tool_calls
        ]
        return AssistantMessage(id=msg.id, content=msg.content or None, tool_calls=calls or None)
    if msg.role is Role.TOOL and msg.tool_call_id:
        return ToolMessage(id=msg.id, content=msg.content, tool_call_id=msg.tool_call_id)
    return None


def user_content(msg: Message, presigned: Mapping[str, str] | None = None) -> Any:
    """A user message's content: its text, or, when it has images or files, its text and a part with a URL for
    each (AG-UI 1.0 ``InputContent``; ``presigned``: the stored parts' presigned GETs by key, as the history gives)."""
    if not msg.parts:
        return msg.content
    content: list[Any] = [TextInputContent(text=msg.content)] if msg.content else []
    for n, part in enumerate(msg.parts):
        source = InputContentUrlSource(value=part_url(msg, n, presigned), mime_type=part.mime_type)
        details = {"filename": part.filename, "size": part.size, "width": part.width, "height": part.height}
        known = {name: value for name, value in details.items() if value is not None}
        content.append(_PART_TYPES[part.kind](source=source, metadata=known or None))
    return content


def messages_snapshot(
    messages: Iterable[Message], presigned: Mapping[str, str] | None = None
) -> MessagesSnapshotEvent:
    """The visible messages, oldest first, as a ``MESSAGES_SNAPSHOT``; ``presigned``: as :func:`user_content`."""
    shown = [agui_message(m, presigned) for m in messages if not m.meta.hidden_from_user]
    return MessagesSnapshotEvent(messages=[m for m in shown if m is not None])
