"""Writes a run's AG-UI events to its stream (and its thread's), and tracks what is open so it can be closed.

The event stream (Redis) is a delivery channel, not the record: the thread and the run ledger (DynamoDB) are. So a
stream outage never fails a run. An event that cannot be appended waits in an ordered in-process backlog and is
written, in order and before any later event, as soon as the stream answers again; ``flush`` gives the backlog a
last bounded chance when the run ends. Readers never see a gap or a reordering, only a delay.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import Any, Protocol

from ag_ui.core import PROTOCOL_VERSION, BaseEvent, EventType, RunStartedEvent

from shared.models import ExecutionMeta
from shared.ports import BatchEventStream, EventStream, StreamEntry

logger = logging.getLogger(__name__)

TERMINAL_TYPES = frozenset({EventType.RUN_FINISHED.value, EventType.RUN_ERROR.value})
LIFECYCLE_TYPES = TERMINAL_TYPES | {
    EventType.RUN_STARTED.value,
    EventType.STEP_STARTED.value,
    EventType.STEP_FINISHED.value,
}

# While the stream is failing, new events go straight to the backlog and a write is retried at most this often, so a
# dead stream costs a run one failed request per interval instead of one per token.
RETRY_INTERVAL_S = 0.5
# A run that outlives a long outage keeps its newest events; the record of what it said is the thread, not the stream.
MAX_BACKLOG = 20_000
# The most events one pipelined write carries (a backlog after an outage drains in slices of this size).
MAX_BATCH = 256


# A role, not a port: shared.runs.local_feed.RunFeed implements it.
class WrittenEntries(Protocol):
    """Where the emitter reports each run-stream entry once the stream holds it (the local feed)."""

    def publish(self, entry: StreamEntry) -> None: ...

    def give_up(self) -> None:
        """A write failed: from here on only the stream has the whole run."""
        ...


def event_to_dict(event: BaseEvent) -> dict[str, Any]:
    """camelCase keys, unset optional fields omitted (the JS client rejects ``null``)."""
    return event.model_dump(mode="json", by_alias=True, exclude_none=True)


def run_started(thread_id: str, run_id: str, meta: ExecutionMeta) -> RunStartedEvent:
    """RUN_STARTED with the run's execution metadata and the AG-UI version it speaks (``protocolVersion: "1.0"``,
    which AG-UI 1.0 asks a producer to declare; docs/protocols/agent/sse-events.md)."""
    return RunStartedEvent(
        thread_id=thread_id,
        run_id=run_id,
        protocol_version=PROTOCOL_VERSION,
        metadata={
            "origin": meta.origin.value,
            "executor": meta.executor.value,
            "executionProfileName": meta.execution_profile_name,
            "hiddenFromUser": meta.hidden_from_user,
        },
    )


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
        retry_interval_s: float = RETRY_INTERVAL_S,
        max_backlog: int = MAX_BACKLOG,
        clear_run_stream: bool = False,
        written: WrittenEntries | None = None,
    ) -> None:
        self._stream = stream
        self._written = written
        # Checked once: an isinstance against a runtime-checkable protocol walks the protocol's members on every
        # call (about 65 us on Python 3.11), and a run drains after each of its events.
        self._batches: BatchEventStream | None = stream if isinstance(stream, BatchEventStream) else None
        self._run_key = run_key
        self._thread_key = thread_key
        self._run_id = run_id
        self._hidden = hidden
        self._retry_interval_s = retry_interval_s
        self._max_backlog = max_backlog
        self._backlog: deque[tuple[str, dict[str, Any]]] = deque()
        # Entries at the end of the backlog that wait for the next event (``defer``): a drain already under way
        # (RUN_STARTED's write, when the executor emits while it is in flight) leaves them for that event's write.
        self._held = 0
        self._failed_at: float | None = None
        self.last_id: str | None = None
        self.count = 0
        self.terminal_sent = False
        self.open_step: str | None = None
        # Tool calls started on the stream and not yet answered (call id -> the assistant message that made it).
        self.unanswered_calls: dict[str, str] = {}
        self.dropped = 0
        self.stream_failures = 0
        self.discarding = False
        # A new run clears whatever is stale under its stream key with its first write (same round trip).
        self._clear_pending = clear_run_stream
        # One writer at a time: RUN_STARTED's write may still be in flight when the executor emits.
        self._writing = asyncio.Lock()

    @property
    def pending(self) -> int:
        """Events accepted but not yet written to the stream."""
        return len(self._backlog)

    async def emit(self, event: BaseEvent, *, defer: bool = False) -> str | None:
        """Queue ``event`` behind any backlog and write what the stream takes; the entry id, or None if it waits.

        ``defer``: only queue it; the next ``emit`` (or ``flush``) writes it with its own event, in one round trip
        (``RUN_STARTED`` goes out with the executor's first step this way)."""
        if self.discarding:
            return None
        if self.terminal_sent:
            raise RuntimeError("no event may follow the terminal event of a run")
        if event.timestamp is None:
            event = event.model_copy(update={"timestamp": int(time.time() * 1000)})
        data = event_to_dict(event)
        before = self.last_id
        # On the thread stream runs interleave, so each event names its run; a hidden run shows only its lifecycle
        # (start, steps, end), never its messages or tool calls.
        to_thread = self._thread_key is not None and (not self._hidden or data.get("type") in LIFECYCLE_TYPES)
        queued = len(self._backlog)
        self._enqueue(self._run_key, data)
        if self._thread_key is not None and to_thread:
            tagged = {**(data.get("metadata") or {}), "runId": self._run_id}
            self._enqueue(self._thread_key, {**data, "metadata": tagged})
        self._held = self._held + len(self._backlog) - queued if defer else 0
        self.count += 1
        kind = data.get("type")
        if kind == EventType.STEP_STARTED.value:
            self.open_step = str(data.get("stepName"))
        elif kind == EventType.STEP_FINISHED.value:
            self.open_step = None
        elif kind == EventType.TOOL_CALL_START.value:
            self.unanswered_calls[str(data["toolCallId"])] = str(data.get("parentMessageId") or "")
        elif kind == EventType.TOOL_CALL_RESULT.value:
            self.unanswered_calls.pop(str(data["toolCallId"]), None)
        if is_terminal(data):
            self.terminal_sent = True
        if defer:
            return None
        if self._failed_at is None or time.monotonic() - self._failed_at >= self._retry_interval_s:
            await self._drain()
        unwritten = len(self._backlog) - self._held  # what is held arrived after this event
        written = not any(self._backlog[i][0] == self._run_key for i in range(unwritten))
        return self.last_id if written and self.last_id != before else None

    def _enqueue(self, key: str, data: dict[str, Any]) -> None:
        if len(self._backlog) >= self._max_backlog:
            self._backlog.popleft()
            self.dropped += 1
            self._held = min(self._held, len(self._backlog))
        self._backlog.append((key, data))

    async def _drain(self) -> bool:
        """Write the backlog in order; stop at the first failure (so nothing overtakes it). True when empty.

        A stream that takes batches gets the run and thread entries of each event (and the whole backlog after an
        outage, in slices) in one pipelined round trip; otherwise one append per entry. Drains never overlap: a
        second one waits and writes what the first left."""
        async with self._writing:
            return await self._drain_unlocked()

    async def _drain_unlocked(self) -> bool:
        """Write the backlog but what is held; True when nothing is left (not even held entries)."""
        while len(self._backlog) > self._held:
            try:
                if self._batches is not None:
                    written = await self._write_batch(self._batches)
                else:
                    written = await self._write_one()
            except Exception:
                self.stream_failures += 1
                if self._written is not None:
                    self._written.give_up()
                if self._failed_at is None:
                    logger.warning(
                        "event stream unavailable; buffering events", extra={"run_id": self._run_id}, exc_info=True
                    )
                self._failed_at = time.monotonic()
                return False
            for (key, data), entry_id in written:
                if key == self._run_key:
                    self.last_id = entry_id
                    if self._written is not None:
                        self._written.publish(StreamEntry(id=entry_id, event=data))
        if self._failed_at is not None:
            logger.info("event stream back; backlog written", extra={"run_id": self._run_id})
            self._failed_at = None
        return not self._backlog

    async def _write_batch(self, stream: BatchEventStream) -> list[tuple[tuple[str, dict[str, Any]], str]]:
        batch = [self._backlog[i] for i in range(min(MAX_BATCH, len(self._backlog) - self._held))]
        ids = await stream.append_batch(batch, clear=self._run_key if self._clear_pending else None)
        self._clear_pending = False
        if self.discarding:
            return []
        for _ in batch:
            self._backlog.popleft()
        return list(zip(batch, ids, strict=True))

    async def _write_one(self) -> list[tuple[tuple[str, dict[str, Any]], str]]:
        if self._clear_pending:
            await self._stream.expire(self._run_key, 0)
            self._clear_pending = False
        entry = self._backlog[0]
        entry_id = await self._stream.append(*entry)
        if self.discarding:
            return []
        self._backlog.popleft()
        return [(entry, entry_id)]

    def discard(self) -> None:
        """Write nothing more: the run was ended by another process (a takeover), which closed its stream."""
        self.discarding = True
        if self._written is not None:
            self._written.give_up()
        self.dropped += len(self._backlog)
        self._backlog.clear()
        self._held = 0

    async def flush(self, timeout_s: float) -> bool:
        """Try to write the backlog for up to ``timeout_s``; True when every accepted event is on the stream."""
        self._held = 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            if await self._drain():
                return True
            remaining = deadline - loop.time()
            if remaining <= 0:
                logger.error(
                    "event stream still unavailable at the end of the run; events not written",
                    extra={"run_id": self._run_id, "pending": len(self._backlog)},
                )
                return False
            await asyncio.sleep(min(self._retry_interval_s, remaining))
