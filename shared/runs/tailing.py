"""Tailing: what every response that follows a run or a thread reads, from the event stream and, at need, the ledger.

The stream (Redis) only delivers; the store (DynamoDB) is the record. A reader that cannot reach the stream for
``stream_outage_grace_s`` gets a terminal ``RUN_ERROR`` ``stream_unavailable``, and a reader of a run that ended
without a terminal event on its stream gets one rebuilt from the run ledger. A response closes shortly before its
invocation's deadline; the client resumes with Last-Event-ID. A reader of a run that executes elsewhere and whose
lease expired (its process stopped without recording the end) ends that run (``shared.runs.dead_runs``): the
takeover's repair closes its stream with ``RUN_ERROR`` ``run_failed``, which the reader then receives.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import Protocol

from ag_ui.core import BaseEvent, RunErrorEvent

from shared.event_json import dumps
from shared.models import Run, utc_now
from shared.ports import EventStream, RetainedStream, StreamEntry
from shared.run_events.emitter import event_to_dict, is_terminal
from shared.run_events.homes import RunHome, run_home, unrecorded_home
from shared.runs.dead_runs import DeadRuns
from shared.runs.local_feed import FeedReader, RunFeed
from shared.runs.outcomes import terminal_from_ledger

logger = logging.getLogger(__name__)

SETTLE_GRACE_S = 15.0
"""How long after the ledger records a run's end its terminal event may still be on its way (settlement)."""
TAIL_DEADLINE_MARGIN_S = 5.0
"""A stream response closes this long before its invocation's deadline; the client resumes with Last-Event-ID."""
FIRST_LEASE_CHECK_S = 1.0
"""How soon a reader of a silent run first reads the ledger (a run whose lease expired is then ended at once)."""
HOME_READ_ATTEMPTS = 3
"""How often a reader tries the ledger for the run's record before it looks for the run in its own run stream."""
STREAM_UNAVAILABLE = "stream_unavailable"
STREAM_UNAVAILABLE_MESSAGE = (
    "The live event stream is unavailable. The run goes on and is saved: read the thread history, or resume "
    "this run's events later."
)


# A role, not a port: the one RunLedger method a tail needs (the store adapters have it).
class RunReader(Protocol):
    async def get_run(self, tenant_id: str, run_id: str) -> Run | None: ...


# A role, not a port: BackgroundRuns implements it, no adapter does.
class LocalRuns(Protocol):
    """What this process knows of its own runs (``shared.runs.execution.BackgroundRuns``)."""

    def is_running(self, tenant_id: str, run_id: str) -> bool: ...

    def settled_here(self, tenant_id: str, run_id: str) -> bool: ...

    def feed(self, tenant_id: str, run_id: str) -> RunFeed | None: ...


def synthetic_entry(event: BaseEvent) -> StreamEntry:
    """An event that is not on the stream: its id is empty, and it is framed without an ``id:`` line (its JSON
    encoded once, here)."""
    data = event_to_dict(event.model_copy(update={"timestamp": int(time.time() * 1000)}))
    return StreamEntry(id="", event=data, json=dumps(data))


class StreamTail:
    """Reads a run's or a thread's events for a response (the module docstring says what ends it)."""

    def __init__(
        self,
        store: RunReader,
        stream: EventStream,
        local: LocalRuns,
        *,
        invocation_deadline: Callable[[], float],
        ping_interval_s: float = 15.0,
        stream_outage_grace_s: float = 5.0,
        settle_grace_s: float = SETTLE_GRACE_S,
        tail_deadline_margin_s: float = TAIL_DEADLINE_MARGIN_S,
        dead_runs: DeadRuns | None = None,
    ) -> None:
        self._store = store
        self._dead_runs = dead_runs
        self._stream = stream
        self._local = local
        self._invocation_deadline = invocation_deadline
        self._ping_interval_s = ping_interval_s
        self._stream_outage_grace_s = stream_outage_grace_s
        self._settle_grace = timedelta(seconds=settle_grace_s)
        self._tail_deadline_margin_s = tail_deadline_margin_s

    async def tail(
        self, key: str, *, after: str = "0-0", until_terminal: bool = True, deadline: float | None = None
    ) -> AsyncIterator[StreamEntry | None]:
        """Entries after ``after``; ``None`` marks a silent stretch (send a ping). A run's tail ends after the
        terminal event; a thread's tail (``until_terminal=False``) goes on until the client leaves, until the
        stream has been unreachable for the outage grace period, or until shortly before the invocation's
        ``deadline``; the client then resumes with its last id."""
        cursor = after
        ends_at = self._tail_ends_at(deadline)
        while True:
            block_ms = self._block_ms(ends_at)
            if block_ms is None:
                return
            entries = await self._read_through_outage(key, cursor, block_ms)
            if entries is None:
                return
            if not entries:
                yield None
                continue
            for entry in entries:
                cursor = entry.id
                yield entry
                if until_terminal and is_terminal(entry.event):
                    return

    async def tail_run(
        self, tenant_id: str, run_id: str, *, after: str = "0-0", deadline: float | None = None
    ) -> AsyncIterator[StreamEntry | None]:
        """A run's events after ``after`` until its terminal event; ``None`` marks a silent stretch.

        Always ends with exactly one terminal event: the stream's own; or, when the ledger says the run ended and
        the stream has none (lost in an outage, or the process died), one rebuilt from the ledger; or, when the
        stream stays unreachable, ``RUN_ERROR`` ``stream_unavailable`` (the run itself goes on). Rebuilt events
        carry an empty id: they are not on the stream and cannot be resumed from. Shortly before the invocation's
        ``deadline`` (a run that executes elsewhere and outlasts this response) it ends without a terminal event,
        and the client resumes with its last id.
        """
        cursor = after
        ends_at = self._tail_ends_at(deadline)
        feed = self._local.feed(tenant_id, run_id)
        reader = feed.reader(after) if feed is not None else None
        if reader is not None:  # the run executes here: its entries as written, not read back from the stream
            async for item in self._feed_entries(reader, ends_at):
                cursor = item.id if item is not None else cursor
                yield item
                if item is not None and is_terminal(item.event):
                    return
        async for item in self._tail_home(tenant_id, run_id, cursor, ends_at):
            yield item

    async def _tail_home(
        self, tenant_id: str, run_id: str, cursor: str, ends_at: float
    ) -> AsyncIterator[StreamEntry | None]:
        """The run's events from its home stream after ``cursor``, until one terminal event (``tail_run``)."""
        # The run executes elsewhere, or the feed could say no more: its home stream, after the last entry sent
        # (its record says where: its thread's stream or its own; a run the ledger does not know, or cannot be
        # read, is looked for in its own). The ledger is read after each silent stretch, and when the run's lease
        # would expire (a dead run is ended).
        # Read with retries: where the run's events are depends on it (a visible run's are on its thread's stream).
        run = await self._read_run(tenant_id, run_id, attempts=HOME_READ_ATTEMPTS)
        home = run_home(run) if run is not None else unrecorded_home(tenant_id, run_id)
        if cursor == "0-0":
            cursor = home.start
        now = time.time()
        ping_at = now + self._ping_interval_s
        check_at = now + FIRST_LEASE_CHECK_S if self._dead_runs is not None else ping_at
        if run is not None and run.status.is_terminal:
            check_at = now  # an ended run (its stream maybe past retention): what the stream has, else the ledger's
        while True:
            block_ms = self._block_ms(ends_at, until=min(ping_at, check_at))
            if block_ms is None:
                return
            read = await self._read_home(home, cursor, block_ms)
            if read is None:
                yield synthetic_entry(
                    RunErrorEvent(
                        message=STREAM_UNAVAILABLE_MESSAGE, code=STREAM_UNAVAILABLE, metadata={"runId": run_id}
                    )
                )
                return
            entries, cursor, advanced = read
            if advanced and not entries:
                continue  # only other runs' entries: read on
            if not entries:
                now = time.time()
                rebuilt = None
                if now >= min(ping_at, check_at):
                    rebuilt, check_at = await self._after_silence(tenant_id, run_id, home, cursor)
                if rebuilt is None:
                    if now >= ping_at:
                        ping_at = now + self._ping_interval_s
                        yield None
                    continue
                entries = rebuilt
            ping_at = time.time() + self._ping_interval_s
            for entry in entries:
                cursor = entry.id or cursor
                yield entry
                if is_terminal(entry.event):
                    return

    async def _read_home(
        self, home: RunHome, cursor: str, block_ms: int
    ) -> tuple[list[StreamEntry], str, bool] | None:
        """The run's entries after ``cursor`` in its home stream (other runs' skipped), the cursor after all that
        was read, and whether anything was read; None once an outage outlasts the grace."""
        entries = await self._read_through_outage(home.key, cursor, block_ms)
        if entries is None:
            return None
        if not entries:
            return [], cursor, False
        return [e for e in entries if home.owns(e)], entries[-1].id, True

    async def _feed_entries(self, reader: FeedReader, ends_at: float) -> AsyncIterator[StreamEntry | None]:
        """What the local feed holds, as a stream read would give it (None: a silent stretch), until the feed can
        say no more or the response's time is up."""
        while (block_ms := self._block_ms(ends_at)) is not None:
            entries = await reader.read(block_ms / 1000)
            if entries is None:
                return
            if not entries:
                yield None
            for entry in entries:
                yield entry

    async def _after_silence(
        self, tenant_id: str, run_id: str, home: RunHome, cursor: str
    ) -> tuple[list[StreamEntry] | None, float]:
        """After a silent stretch: what ``_rebuilt_terminal`` finds, and when to read the ledger next (at the next
        ping, or when the lease of a run that executes elsewhere expires, whichever comes first)."""
        run = await self._read_run(tenant_id, run_id)
        next_check = time.time() + self._ping_interval_s
        if run is None or run.status.is_terminal or self._dead_runs is None:
            return await self._rebuilt_terminal(tenant_id, run, home, cursor), next_check
        if self._local.is_running(tenant_id, run_id):
            return None, next_check
        if not self._dead_runs.is_dead(run):
            return None, min(next_check, time.time() + self._dead_runs.seconds_until_expiry(run))
        try:
            await self._dead_runs.end(run)
        except Exception:
            logger.exception("could not end a dead run for its reader", extra={"run_id": run_id})
            return None, next_check
        # The repair closed the run's stream with its terminal event (or another reader's did): read it now.
        return await self._rest(home, cursor) or None, time.time() + FIRST_LEASE_CHECK_S

    async def _rest(self, home: RunHome, cursor: str) -> list[StreamEntry]:
        """Every entry of the run the stream holds after ``cursor``, without waiting."""
        found: list[StreamEntry] = []
        while (read := await self._read_home(home, cursor, 0)) is not None and read[2]:
            entries, cursor, _ = read
            found += entries
            if any(is_terminal(e.event) for e in entries):
                break
        return found

    async def _rebuilt_terminal(
        self, tenant_id: str, ended: Run | None, home: RunHome, cursor: str
    ) -> list[StreamEntry] | None:
        """None while the run goes on (or its terminal event may still come); else what follows ``cursor`` after
        all, or the terminal event rebuilt from the ledger."""
        if ended is None or not ended.status.is_terminal:
            return None
        if self._terminal_may_come(tenant_id, ended) and (
            self._local.is_running(tenant_id, ended.run_id) or not await self._stream_gone(home.key)
        ):
            return None
        # The run settled and its terminal event never reached the stream (or, for a run settled elsewhere, the
        # stream is past its retention: a key that holds nothing gets no terminal event any more): one more look,
        # then the event rebuilt from the ledger.
        return await self._rest(home, cursor) or [synthetic_entry(terminal_from_ledger(ended))]

    async def _stream_gone(self, key: str) -> bool:
        """Whether the stream ``key`` holds nothing (expired with its retention, or deleted); False when the
        stream cannot say or cannot be reached."""
        if not isinstance(self._stream, RetainedStream):
            return False
        try:
            return await self._stream.oldest_id(key) is None
        except Exception:
            return False

    def _tail_ends_at(self, deadline: float | None) -> float:
        """When a stream response closes (epoch seconds): before its invocation's deadline, with a margin."""
        return (deadline or self._invocation_deadline()) - self._tail_deadline_margin_s

    def _block_ms(self, ends_at: float, *, until: float | None = None) -> int | None:
        """How long the next blocking read may wait: the ping interval (or until ``until``), cut at the end; None
        once the end has passed."""
        now = time.time()
        left = ends_at - now
        if left <= 0:
            return None
        wait = self._ping_interval_s if until is None else max(0.0, until - now)
        return max(1, int(min(wait, left) * 1000))

    def _terminal_may_come(self, tenant_id: str, ended: Run) -> bool:
        """Whether an ended run's terminal event may still be on its way: it goes on the stream after the ledger
        records the end (settlement). This process knows its own runs; for another's, the settle grace decides."""
        if self._local.is_running(tenant_id, ended.run_id):
            return True
        if self._local.settled_here(tenant_id, ended.run_id):
            return False
        return utc_now() - ended.updated_at < self._settle_grace

    async def _read_run(self, tenant_id: str, run_id: str, *, attempts: int = 1) -> Run | None:
        """The run's record; None when the ledger does not hold it, or could not be read ``attempts`` times (a
        quarter second apart)."""
        for attempt in range(attempts):
            try:
                return await self._store.get_run(tenant_id, run_id)
            except Exception:
                logger.warning("could not read the run ledger while tailing", extra={"run_id": run_id})
                if attempt + 1 < attempts:
                    await asyncio.sleep(0.25)
        return None

    async def _read_through_outage(self, key: str, cursor: str, block_ms: int) -> list[StreamEntry] | None:
        """``read_after``, retried while the stream is unreachable; None once the outage outlasts the grace."""
        loop = asyncio.get_running_loop()
        deadline: float | None = None
        while True:
            try:
                return await self._stream.read_after(key, cursor, block_ms=block_ms)
            except Exception:
                now = loop.time()
                if deadline is None:
                    logger.warning("event stream unreachable while tailing", extra={"key": key})
                    deadline = now + self._stream_outage_grace_s
                if now >= deadline:
                    return None
                await asyncio.sleep(min(0.25, deadline - now))
