"""Coalescing of streamed deltas: the text and argument deltas of one message that arrive within a short window
are written to the stream as one event.

A model streams a token or two per chunk; written one by one, each chunk is a stream entry, a Redis command and an
SSE frame, and the app's CPU per turn grows with the chunk count, not with the text. Batched over ``window_s``, a
300-chunk answer is a few dozen events, and the client still sees exactly the model's text: a batch is the
concatenation of whole deltas (a delta is never split), in order.

What a client may rely on is in docs/protocols/agent/sse-events.md §2: the first delta of each message is written
at once (the first text is never held back), and whatever is pending is written before any other event.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ag_ui.core import EventType

DEFAULT_WINDOW_S = 0.05
"""How long deltas of one message are gathered before they are written as one event."""
DEFAULT_MAX_CHARS = 2048
"""The most characters one batch gathers; a delta that would pass it starts the next batch (it is not split)."""

_TARGET_FIELD = {EventType.TEXT_MESSAGE_CONTENT.value: "messageId", EventType.TOOL_CALL_ARGS.value: "toolCallId"}


@dataclass(frozen=True, slots=True)
class Coalescing:
    """The batching of a run's deltas (settings ``EVENT_COALESCE_WINDOW_MS`` and ``EVENT_COALESCE_MAX_CHARS``)."""

    window_s: float = DEFAULT_WINDOW_S
    max_chars: int = DEFAULT_MAX_CHARS


def delta_target(event: dict[str, Any]) -> tuple[str, str] | None:
    """``(type, message or tool call id)`` of a delta that may be batched; None for any other event."""
    kind = event.get("type")
    field = _TARGET_FIELD.get(kind) if isinstance(kind, str) else None
    return None if field is None else (str(kind), str(event.get(field, "")))


class DeltaBatch:
    """The deltas of one message (or tool call) waiting to go out as one event: the first one's fields, every
    delta joined."""

    __slots__ = ("_first", "_parts", "chars", "target")

    def __init__(self, target: tuple[str, str], first: dict[str, Any]) -> None:
        self.target = target
        self._first = first
        self._parts: list[str] = [str(first.get("delta", ""))]
        self.chars = len(self._parts[0])

    def fits(self, target: tuple[str, str], delta: str, max_chars: int) -> bool:
        """Whether ``delta`` of ``target`` may join this batch (same message, under the cap)."""
        return target == self.target and self.chars + len(delta) <= max_chars

    def add(self, delta: str) -> None:
        self._parts.append(delta)
        self.chars += len(delta)

    def event(self) -> dict[str, Any]:
        """The one event the batch is written as: the first delta's event (its timestamp) with every delta."""
        if len(self._parts) == 1:
            return self._first
        return {**self._first, "delta": "".join(self._parts)}
