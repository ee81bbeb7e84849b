"""Writes a run's AG-UI events to their stream, once each, and tracks what is open so it can be closed.

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

from shared.event_json import dumps
from shared.models import ExecutionMeta
from shared.ports import BatchEventStream, EventStream, StreamEntry
from shared.run_events.coalescing import Coalescing, DeltaBatch, delta_target

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

Queued = tuple[str, dict[str, Any], str]
"""A backlog entry: the stream key, the event (as its readers get it) and its JSON text, encoded once."""


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
    """Appends events of one run, in order, each once, to the run's *home* stream.

    A visible run's home is its thread's stream (``thread_key``): a follower of the thread and a reader of the run
    read the same entries, so each event is one stream write (docs/storage.md, "Redis streams"). A hidden run
    (automation, memory) lives in its own run stream (``run_key``) and puts only its lifecycle events on the thread
    stream too, so a client following a thread sees a ``memory`` step without ever seeing hidden content. Without
    a ``thread_key`` the home is ``run_key``.

    Every event is tagged with ``metadata.runId`` (when ``run_id`` is given): on a thread stream runs interleave.
    The ``id:`` of every SSE frame of the run is its home stream's entry id.

    ``coalescing``: text and argument deltas are batched (``shared.run_events.coalescing``); None writes every
    delta as it comes.
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
        coalescing: Coalescing | None = None,
    ) -> None:
        self._stream = stream
        self._written = written
        # Checked once: an isinstance against a runtime-checkable protocol walks the protocol's members on every
        # call (about 65 us on Python 3.11), and a run drains after each of its events.
        self._batches: BatchEventStream | None = stream if isinstance(stream, BatchEventStream) else None
        self._run_key = run_key
        self.home_key = thread_key if thread_key is not None and not hidden else run_key
        """The stream that carries every event of the run (its readers tail it)."""
        self._thread_key = thread_key if hidden else None  # where a hidden run's lifecycle goes besides
        self._run_id = run_id
        self._coalescing = coalescing
        self._batch: DeltaBatch | None = None
        self._started_targets: set[tuple[str, str]] = set()
        self._window: asyncio.TimerHandle | None = None
        self._window_tasks: set[asyncio.Task[bool]] = set()
        self._retry_interval_s = retry_interval_s
        self._max_backlog = max_backlog
        self._backlog: deque[Queued] = deque()
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
        # A new run clears whatever is stale under its own stream key with its first write (same round trip); a
        # thread stream is shared, and its readers pick the run's entries by ``metadata.runId``.
        self._clear_pending = clear_run_stream and self.home_key == run_key
        # One writer at a time: RUN_STARTED's write may still be in flight when the executor emits.
        self._writing = asyncio.Lock()

    @property
    def pending(self) -> int:
        """Events accepted but not yet written to the stream."""
        return len(self._backlog)

    async def emit(self, event: BaseEvent, *, defer: bool = False) -> str | None:
        """Queue ``event`` behind any backlog and write what the stream takes; the entry id, or None if it waits
        (or joined a batch of deltas, written when its window closes or before the next other event).

        ``defer``: only queue it; the next ``emit`` (or ``flush``) writes it with its own event, in one round trip
        (``RUN_STARTED`` goes out with the executor's first step this way)."""
        if self.discarding:
            return None
        if self.terminal_sent:
            raise RuntimeError("no event may follow the terminal event of a run")
        if event.timestamp is None:
            event = event.model_copy(update={"timestamp": int(time.time() * 1000)})
        data = event_to_dict(event)
        self.count += 1
        target = delta_target(data) if self._coalescing is not None else None
        if target is not None and target in self._started_targets:
            await self._gather(target, data)
            return None
        if target is not None:
            self._started_targets.add(target)  # the first delta of a message goes out at once
        before = self.last_id
        self._release_batch()  # whatever waits is written before any other event
        queued = len(self._backlog)
        self._queue_event(data)
        self._held = self._held + len(self._backlog) - queued if defer else 0
        self._track(data)
        if defer:
            return None
        if self._failed_at is None or time.monotonic() - self._failed_at >= self._retry_interval_s:
            await self._drain()
        unwritten = len(self._backlog) - self._held  # what is held arrived after this event
        written = not any(self._backlog[i][0] == self.home_key for i in range(unwritten))
        return self.last_id if written and self.last_id != before else None

    def _track(self, data: dict[str, Any]) -> None:
        """What the event opens or closes (the step, the unanswered tool calls) and whether it ends the run."""
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

    async def _gather(self, target: tuple[str, str], data: dict[str, Any]) -> None:
        """A later delta of a message: joins the waiting batch, or starts one (written when its window closes)."""
        assert self._coalescing is not None
        delta = str(data.get("delta", ""))
        if self._batch is not None and self._batch.fits(target, delta, self._coalescing.max_chars):
            self._batch.add(delta)
            return
        full = self._release_batch()
        self._batch = DeltaBatch(target, data)
        if self._window is None:
            self._window = asyncio.get_running_loop().call_later(self._coalescing.window_s, self._window_closed)
        if full and (self._failed_at is None or time.monotonic() - self._failed_at >= self._retry_interval_s):
            await self._drain()

    def _release_batch(self) -> bool:
        """Queue the waiting batch of deltas as one event (before whatever comes next); True when there was one."""
        batch, self._batch = self._batch, None
        if self._window is not None:
            self._window.cancel()
            self._window = None
        if batch is None:
            return False
        self._queue_event(batch.event())
        return True

    def _window_closed(self) -> None:
        """The batch's window closed: queue it and write it (a task, so a slow stream holds up nobody)."""
        self._window = None
        if self.discarding or not self._release_batch():
            return
        if self._failed_at is not None and time.monotonic() - self._failed_at < self._retry_interval_s:
            return
        task = asyncio.get_running_loop().create_task(self._drain())
        self._window_tasks.add(task)
        task.add_done_callback(self._window_tasks.discard)

    def _queue_event(self, data: dict[str, Any]) -> None:
        """Tag the event with its run, encode it once, and queue it for its home stream (and, for a hidden run's
        lifecycle event, the thread stream: the same text)."""
        if self._run_id is not None:
            data = {**data, "metadata": {**(data.get("metadata") or {}), "runId": self._run_id}}
        text = dumps(data)
        self._enqueue((self.home_key, data, text))
        if self._thread_key is not None and data.get("type") in LIFECYCLE_TYPES:
            self._enqueue((self._thread_key, data, text))

    def _enqueue(self, entry: Queued) -> None:
        if len(self._backlog) >= self._max_backlog:
            self._backlog.popleft()
            self.dropped += 1
            self._held = min(self._held, len(self._backlog))
        self._backlog.append(entry)

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
            for (key, data, text), entry_id in written:
                if key == self.home_key:
                    self.last_id = entry_id
                    if self._written is not None:
                        self._written.publish(StreamEntry(id=entry_id, event=data, json=text))
        if self._failed_at is not None:
            logger.info("event stream back; backlog written", extra={"run_id": self._run_id})
            self._failed_at = None
        return not self._backlog

    async def _write_batch(self, stream: BatchEventStream) -> list[tuple[Queued, str]]:
        batch = [self._backlog[i] for i in range(min(MAX_BATCH, len(self._backlog) - self._held))]
        ids = await stream.append_batch(
            [(key, data) for key, data, _ in batch],
            clear=self._run_key if self._clear_pending else None,
            encoded=[text for _, _, text in batch],
        )
        self._clear_pending = False
        if self.discarding:
            return []
        for _ in batch:
            self._backlog.popleft()
        return list(zip(batch, ids, strict=True))

    async def _write_one(self) -> list[tuple[Queued, str]]:
        if self._clear_pending:
            await self._stream.expire(self._run_key, 0)
            self._clear_pending = False
        entry = self._backlog[0]
        entry_id = await self._stream.append(entry[0], entry[1])
        if self.discarding:
            return []
        self._backlog.popleft()
        return [(entry, entry_id)]

    def discard(self) -> None:
        """Write nothing more: the run was ended by another process (a takeover), which closed its stream."""
        self.discarding = True
        self._batch = None
        if self._window is not None:
            self._window.cancel()
            self._window = None
        if self._written is not None:
            self._written.give_up()
        self.dropped += len(self._backlog)
        self._backlog.clear()
        self._held = 0

    async def flush(self, timeout_s: float) -> bool:
        """Try to write the backlog for up to ``timeout_s``; True when every accepted event is on the stream."""
        self._release_batch()
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
