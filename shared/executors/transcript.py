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


def with_run_notes(history: list[ChatMessage], notes: list[ChatMessage]) -> list[ChatMessage]:
    """``history`` with the notes that change from run to run (memory note, client context) placed just before its
    newest user message, after everything that stays the same.

    A provider's prefix cache (DashScope's implicit cache) bills a prompt's leading part that matches a recent
    request at a fraction of the price. Notes placed after the system prompt would change that prefix whenever the
    user's memories or the client's context do, and the whole history behind them would be billed in full; here
    the next run still matches everything up to where this run's notes were. The model turn after tool results
    keeps the notes where they were, so it matches the first turn's whole prompt.
    """
    if not notes:
        return history
    newest_user = next((i for i in range(len(history) - 1, -1, -1) if history[i].role == "user"), len(history))
    return [*history[:newest_user], *notes, *history[newest_user:]]
