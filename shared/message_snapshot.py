"""A thread's stored conversation as one AG-UI ``MESSAGES_SNAPSHOT`` (``GET /threads/{id}/events?snapshot=messages``).

A client that reconnects, or opens the thread on a second device, gets the visible conversation in one event,
then follows the thread's live events from the point the snapshot was taken (``shared.threads``). Messages of
hidden runs (memory, automation) are never in it, nor are stored system notes: what the history API shows.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ag_ui.core import AssistantMessage, FunctionCall, MessagesSnapshotEvent, ToolCall, ToolMessage, UserMessage

from shared.models import Message, Role

SNAPSHOT_MESSAGES = 200
"""The newest visible messages a snapshot holds (the history API pages through older ones)."""


def agui_message(msg: Message) -> Any:
    """One stored message in AG-UI message form; None for a role the snapshot leaves out."""
    if msg.role is Role.USER:
        return UserMessage(id=msg.id, content=msg.content)
    if msg.role is Role.ASSISTANT:
        calls = [
            ToolCall(id=c.id, type="function", function=FunctionCall(name=c.name, arguments=c.arguments))
            for c in msg.tool_calls
        ]
        return AssistantMessage(id=msg.id, content=msg.content or None, tool_calls=calls or None)
    if msg.role is Role.TOOL and msg.tool_call_id:
        return ToolMessage(id=msg.id, content=msg.content, tool_call_id=msg.tool_call_id)
    return None


def messages_snapshot(messages: Iterable[Message]) -> MessagesSnapshotEvent:
    """The visible messages, oldest first, as a ``MESSAGES_SNAPSHOT``."""
    shown = [agui_message(m) for m in messages if not m.meta.hidden_from_user]
    return MessagesSnapshotEvent(messages=[m for m in shown if m is not None])
