"""Writes a run's AG-UI events to its stream (and its thread's), and tracks what is open so it can be closed."""

from __future__ import annotations

import time
from typing import Any

from ag_ui.core import BaseEvent, EventType

from shared.ports import EventStream

TERMINAL_TYPES = frozenset({EventType.RUN_FINISHED.value, EventType.RUN_ERROR.value})
LIFECYCLE_TYPES = TERMINAL_TYPES | {
    EventType.RUN_STARTED.value,
    EventType.STEP_STARTED.value,
    EventType.STEP_FINISHED.value,
}


def event_to_dict(event: BaseEvent) -> dict[str, Any]:
    """camelCase keys, unset optional fields omitted (the JS client rejects ``null``)."""
    return event.model_dump(mode="json", by_alias=True, exclude_none=True)


def is_terminal(event: dict[str, Any]) -> bool:
    return event.get("type") in TERMINAL_TYPES


class RunEmitter:
    """Appends events of one run, in order, to the run's stream and, when given, to the thread's stream.

    The run stream is what ``POST /agent`` and ``GET /agent/runs/{id}/events`` tail, so the ``id:`` of every SSE
    frame is the run stream's entry id.

    The thread stream carries every run's events, tagged with ``metadata.runId``; hidden runs (automation,
    memory) appear there only as their lifecycle events, so a client following a thread sees a ``memory`` step
    without ever seeing hidden content.
    """

    def __init__(
        self,
        stream: EventStream,
        run_key: str,
        *,
        thread_key: str | None = None,
        run_id: str | None = None,
        hidden: bool = False,
    ) -> None:
        self._stream = stream
        self._run_key = run_key
        self._thread_key = thread_key
        self._run_id = run_id
        self._hidden = hidden
        self.last_id: str | None = None
        self.count = 0
        self.terminal_sent = False

    async def emit(self, event: BaseEvent) -> str:
        if self.terminal_sent:
            raise RuntimeError("no event may follow the terminal event of a run")
        if event.timestamp is None:
            event = event.model_copy(update={"timestamp": int(time.time() * 1000)})
        data = event_to_dict(event)
        entry_id = await self._stream.append(self._run_key, data)
        if self._thread_key is not None and (not self._hidden or data.get("type") in LIFECYCLE_TYPES):
            # On the thread stream runs interleave, so each event names its run; a hidden run shows only its
            # lifecycle (start, steps, end), never its messages or tool calls.
            tagged = dict(data)
            tagged["metadata"] = {**data.get("metadata", {}), "runId": self._run_id}
            await self._stream.append(self._thread_key, tagged)
        self.last_id = entry_id
        self.count += 1
        if is_terminal(data):
            self.terminal_sent = True
        return entry_id
