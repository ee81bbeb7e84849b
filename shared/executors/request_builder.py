"""The worker's model request, built from values: the system prompt, the token reserve, the run's notes and the
request itself. Nothing here reads or writes: the worker's loop hands in the window it read and the notes it has,
and gets the request back (the shape of openai-agents-python's ``run_internal/turn_preparation``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from zoneinfo import ZoneInfo

from shared.executors.context import RunContext
from shared.executors.transcript import one_leading_system, to_chat_messages, with_run_notes
from shared.intent.prompts import build_system_prompt
from shared.llm.types import ChatMessage, ChatRequest, ToolSpec
from shared.models import Message

MAX_CONTEXT_NOTE_CHARS = 4_000

SystemPrompt = Callable[[RunContext, list[ToolSpec]], str]
"""A system prompt chosen by the caller instead of the profile's intent variant (tests, evaluations)."""


def system_prompt(ctx: RunContext, tools: list[ToolSpec], now: datetime, custom: SystemPrompt | None) -> str:
    """The run's system prompt: the profile's intent variant, with the tools and the date in the profile's zone."""
    if custom is not None:
        return custom(ctx, tools)
    local = now.astimezone(ZoneInfo(ctx.profile.history_policy.timezone))
    return build_system_prompt(ctx.profile.intent_variant, tools, local)


def base_reserve(count: Callable[[str], int], prompt: str, ctx: RunContext, tools: Sequence[ToolSpec]) -> int:
    """The tokens the request needs besides the history and the memory note: prompt, context notes, tool specs."""
    reserve = sum(count(text) for text in (prompt, *ctx.context_notes))
    return reserve + sum(count(json.dumps(t.parameters)) + count(t.description) for t in tools)


def run_notes(ctx: RunContext, memory_note: str | None, state_note: str) -> list[str]:
    """What changes per run and goes with the newest user message: memories, shared state, the client's context."""
    notes = [note for note in (memory_note, state_note) if note]
    if ctx.context_notes:
        note = "\n".join(ctx.context_notes)[:MAX_CONTEXT_NOTE_CHARS]
        notes.append(f"Client context (informational):\n{note}")
    return notes


def model_request(
    ctx: RunContext,
    prompt: str,
    tools: Sequence[ToolSpec],
    history: Sequence[Message],
    notes: list[str],
    images: Mapping[str, str] | None = None,
) -> ChatRequest:
    """The request of one model turn. Stable first (system prompt, tool specs, history), what changes per run inside
    the newest user message: the provider's prefix cache then matches the history (see ``with_run_notes``).
    ``images``: the URL of each stored image of the history, by key (``shared.executors.images``)."""
    messages = [ChatMessage(role="system", content=prompt), *to_chat_messages(list(history), images)]
    return ChatRequest(
        model=ctx.profile.model.name,
        messages=tuple(one_leading_system(with_run_notes(messages, notes))),
        tools=tuple(tools),
        thinking=ctx.profile.model.thinking,
    )
