"""Turns stored messages into the chat messages a model sees."""

from __future__ import annotations

from collections.abc import Iterable

from shared.llm.types import ChatMessage
from shared.models import Message, Role


def to_chat_messages(messages: Iterable[Message]) -> list[ChatMessage]:
    out: list[ChatMessage] = []
    for msg in messages:
        if msg.role is Role.ASSISTANT:
            out.append(
                ChatMessage(
                    role="assistant",
                    content=msg.content or None,
                    tool_calls=tuple((tc.id, tc.name, tc.arguments) for tc in msg.tool_calls),
                )
            )
        elif msg.role is Role.TOOL:
            out.append(ChatMessage(role="tool", content=msg.content, tool_call_id=msg.tool_call_id))
        elif msg.role is Role.SYSTEM:
            out.append(ChatMessage(role="system", content=msg.content))
        else:
            out.append(ChatMessage(role="user", content=msg.content))
    return out
