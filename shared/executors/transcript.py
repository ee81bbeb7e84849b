"""Turns stored messages into the chat messages a model sees."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from shared.llm.types import RUN_NOTES_BEGIN, RUN_NOTES_END, ChatMessage
from shared.models import Message, MessagePart, Role


def _part_text(part: MessagePart) -> str:
    """What the model reads of a non-image part: a document's text labelled with its name, else a placeholder."""
    name = part.filename or "unnamed"
    if part.kind == "document" and part.text is not None:
        return f"[document: {name} ({part.mime_type})]\n{part.text}\n[/document]"
    return f"[{part.kind}: {name} ({part.mime_type}) not available]"


def to_chat_messages(messages: Iterable[Message], images: Mapping[str, str] | None = None) -> list[ChatMessage]:
    """The model's view of stored messages; ``images``: each stored image's URL for the provider, by object key
    (a client's URL source is its own)."""
    images = images or {}
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
        elif msg.parts:
            urls: list[str] = []
            texts = [msg.content] if msg.content else []
            for part in msg.parts:
                url = part.url if part.url is not None else images.get(part.key or "")
                if part.kind == "image" and url is not None:
                    urls.append(url)
                else:
                    texts.append(_part_text(part))
            out.append(ChatMessage(role="user", content="\n\n".join(texts), images=tuple(urls)))
        else:
            out.append(ChatMessage(role="user", content=msg.content))
    return out


def with_run_notes(history: list[ChatMessage], notes: list[str]) -> list[ChatMessage]:
    """``history`` with the notes that change from run to run (memory note, client context) put in front of its
    newest user message's text, after everything that stays the same.

    A provider's prefix cache (DashScope's implicit cache) bills a prompt's leading part that matches a recent
    request at a fraction of the price. Notes placed after the system prompt would change that prefix whenever the
    user's memories or the client's context do, and the whole history behind them would be billed in full; here
    the next run still matches everything up to this run's newest user message. The model turn after tool results
    keeps the notes where they were, so it matches the first turn's whole prompt.

    The notes ride inside the user message, marked, rather than as system messages of their own: Qwen3.5's chat
    template (vLLM, llama.cpp with the model's own template) rejects any system message that is not the first one
    ("System message must be at the beginning"). With no user message in the window they become one at the end.
    """
    if not notes:
        return history
    block = "\n\n".join([RUN_NOTES_BEGIN, *notes, RUN_NOTES_END])
    newest_user = next((i for i in range(len(history) - 1, -1, -1) if history[i].role == "user"), None)
    if newest_user is None:
        return [*history, ChatMessage(role="user", content=block)]
    target = history[newest_user]
    merged = dataclasses.replace(target, content=f"{block}\n\n{target.content or ''}")
    return [*history[:newest_user], merged, *history[newest_user + 1 :]]


def one_leading_system(messages: list[ChatMessage]) -> list[ChatMessage]:
    """The request with one system message, first: a later one (a stored system message) is sent as a user
    message saying what it is, for the chat templates that refuse a system message anywhere else."""
    return [
        m if m.role != "system" or i == 0 else ChatMessage(role="user", content=f"[system note]\n{m.content or ''}")
        for i, m in enumerate(messages)
    ]
