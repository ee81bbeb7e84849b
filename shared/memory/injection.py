"""Memories in use: the bounded system note the worker adds to its context, and how to recognise it.

The note starts with :data:`MEMORY_INJECTION_SENTINEL`. Whatever carries the sentinel (a stored system message,
a user pasting the note back, a client echoing it) is never a source for the memory executor: it does not show
the text to the model and the gate rejects any proposal quoting or citing it. That is the counter-measure to
the best-known memory failure, memories re-extracted from text that was injected from memory.
"""

from __future__ import annotations

from collections.abc import Sequence

from shared.memory.models import Memory
from shared.memory.ports import MemoryStore
from shared.memory.text import relevance, tokens
from shared.models import Identity, Message
from shared.tracing.api import span

MEMORY_INJECTION_SENTINEL = "[memory-injection]"
MEMORY_INJECTION_END = "[/memory-injection]"
MAX_INJECTED_MEMORIES = 20
MAX_INJECTION_CHARS = 2_000
MAX_MEMORY_LINE_CHARS = 300
MEMORY_CANDIDATES = 50
"""How many of a user's most recently updated active memories the worker ranks for the note (one bounded read)."""

_HEADER = (
    f"{MEMORY_INJECTION_SENTINEL} Long-term memories about this user, from earlier conversations. Use them when "
    "they help; they may be outdated, and the user's current words win. Do not read this list back to the user."
)


def is_memory_injection(text: str) -> bool:
    return MEMORY_INJECTION_SENTINEL in text


def message_is_memory_injection(message: Message) -> bool:
    return bool(message.flags.get("memory_injection")) or is_memory_injection(message.content)


def rank_by_relevance(memories: Sequence[Memory], query: str, *, limit: int) -> list[Memory]:
    """Active memories, most lexically relevant to ``query`` first, then most recently updated."""
    query_tokens = tokens(query)
    active = [m for m in memories if m.is_active]
    ranked = sorted(
        active,
        key=lambda m: (relevance(query_tokens, m.content), m.updated_at.timestamp(), m.id),
        reverse=True,
    )
    return ranked[:limit]


class ActiveMemories:
    """What the worker reads memories through (its ``MemoryReader``): the user's active memories, most
    relevant to ``query`` first. ``render_memories`` turns them into the note."""

    def __init__(self, store: MemoryStore) -> None:
        self._store = store

    async def relevant_active(self, identity: Identity, query: str, *, limit: int) -> list[Memory]:
        """Ranked among the ``MEMORY_CANDIDATES`` most recently updated active memories: one bounded read."""
        memories = await self._store.list_active(
            identity.tenant_id, identity.user_id, limit=max(limit, MEMORY_CANDIDATES)
        )
        return rank_by_relevance(memories, query, limit=limit)

    async def note(self, identity: Identity, query: str, *, limit: int) -> str:
        """The worker's note: the memories chosen by relevance, listed in a stable order (oldest first), so the
        note only changes when the chosen memories do; empty when there are none."""
        with span("agent.memory.read") as traced:
            memories = await self.relevant_active(identity, query, limit=limit)
            traced.set("agent.memory.count", len(memories))
        return render_memories(memories, stable_order=True) if memories else ""


def render_memories(
    memories: Sequence[Memory],
    *,
    query: str = "",
    limit: int = MAX_INJECTED_MEMORIES,
    max_chars: int = MAX_INJECTION_CHARS,
    stable_order: bool = False,
) -> str:
    """The system note for the worker: at most ``limit`` active memories and ``max_chars`` characters. With a
    ``query`` (e.g. the current user message) they are ranked most relevant first; without one they are taken in
    the order given (already ranked, e.g. by :meth:`ActiveMemories.relevant_active`). ``stable_order``: the
    memories that fit (chosen in that order) are listed oldest first, so the note of a user whose memories did not
    change is the same text on every run, whatever the message (the provider's prompt cache keeps it). Empty when
    there is nothing to say."""
    if query:
        chosen = rank_by_relevance(memories, query, limit=limit)
    else:
        chosen = [m for m in memories if m.is_active][:limit]
    if not chosen:
        return ""
    lines = [_HEADER]
    size = len(_HEADER) + len(MEMORY_INJECTION_END) + 2
    kept: list[tuple[Memory, str]] = []
    for memory in chosen:
        text = " ".join(memory.content.split())
        if len(text) > MAX_MEMORY_LINE_CHARS:
            text = text[: MAX_MEMORY_LINE_CHARS - 1] + "…"
        line = f"- ({memory.kind.value}) {text}"
        if size + len(line) + 1 > max_chars:
            break
        kept.append((memory, line))
        size += len(line) + 1
    if not kept:
        return ""
    if stable_order:
        kept.sort(key=lambda pair: (pair[0].created_at, pair[0].id))
    lines.extend(line for _memory, line in kept)
    lines.append(MEMORY_INJECTION_END)
    return "\n".join(lines)
