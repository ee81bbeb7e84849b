"""What a run watches while it executes: its lease (the heartbeat) and its control signal (a cancel).

Both run as tasks on the run's own event loop, so they need no thread and stop with the run.

- The heartbeat renews the run's lease on its thread with one DynamoDB write every ``heartbeat_s``; the write
  returns the run's record, so a cancel asked through the ledger (when Redis was down) and an end written by a
  takeover (this run's lease had expired: its process was frozen) are seen without a second request.
- The control signal is a Redis stream per run (``run_control_key``) that the run blocks on; a cancel from any
  process appends to it and the run stops within the time of one Redis round trip. Reading from the start of the
  stream means a cancel sent before the watcher started is not missed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from shared.models import Run
from shared.ports import EventStream
from shared.stream_keys import run_control_key

logger = logging.getLogger(__name__)

CANCEL_SIGNAL = "cancel"
STOP_SIGNAL = "stop"
"""Written by the run itself when it ends, so its blocking read returns normally: cancelling a blocking read makes
redis-py drop the connection, and every next run would open a new one (connect, HELLO, CLIENT SETINFO)."""
CONTROL_TTL_S = 300
"""How long a run's control stream stays once the run ended (a late cancel finds a stream that says it stopped)."""
SIGNAL_BLOCK_MS = 10_000
"""How long one blocking read of the control stream waits (below the Redis client's 20 s socket timeout)."""
SIGNAL_RETRY_S = 1.0
STOP_WAIT_S = 0.2
"""How long ``stop`` waits for the watchers. redis-py can swallow the cancellation of a blocking read (the task then
goes on reading); such a watcher sees the stop flag when its read returns (at most ``SIGNAL_BLOCK_MS``) and ends."""


class LeaseState:
    """What the watchers learned: ``lost`` when another run took the thread over and ended this one."""

    def __init__(self) -> None:
        self.lost = False
        self.beats = 0
        self.failed_beats = 0
        self.cancel_seen_via: str | None = None


class RunWatch:
    """Starts and stops the heartbeat and the signal watcher of one run; ``stop`` is what the run calls at its end."""

    def __init__(
        self,
        *,
        tenant_id: str,
        run_id: str,
        beat: Callable[[], Any],
        stream: EventStream,
        heartbeat_s: float,
        on_cancel: Callable[..., None],
        signal_block_ms: int = SIGNAL_BLOCK_MS,
    ) -> None:
        self._tenant_id = tenant_id
        self._run_id = run_id
        self._beat = beat
        self._stream = stream
        self._heartbeat_s = heartbeat_s
        self._on_cancel = on_cancel
        self._signal_block_ms = signal_block_ms
        self.state = LeaseState()
        self._stopping = False
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._heartbeat(), name=f"heartbeat:{self._run_id}"),
            asyncio.create_task(self._signals(), name=f"signals:{self._run_id}"),
        ]

    async def stop(self) -> None:
        """Stop both watchers and wait for them, at most ``STOP_WAIT_S``. The signal watcher is woken by a stop
        entry on its own control stream (its read returns, its connection stays usable); it is cancelled only
        when that write fails. A Redis client can be slow to give up a blocking read it was cancelled in, and the
        run's end must never wait on that."""
        self._stopping = True
        if not self._tasks:
            return
        heartbeat, signals = self._tasks
        heartbeat.cancel()
        woken = not signals.done() and await self._wake_signal_watcher()
        if not woken:
            signals.cancel()
        waiting = asyncio.wait(self._tasks, timeout=STOP_WAIT_S)
        if woken:
            (_done, pending), _ = await asyncio.gather(waiting, self._expire_control_stream())
        else:
            _done, pending = await waiting
        for task in pending:
            task.cancel()
        if pending:
            logger.warning(
                "a run watcher did not stop at once; it ends when its blocking read returns",
                extra={"run_id": self._run_id, "watchers": sorted(t.get_name() for t in pending)},
            )

    async def _wake_signal_watcher(self) -> bool:
        try:
            await self._stream.append(run_control_key(self._tenant_id, self._run_id), {"type": STOP_SIGNAL})
        except Exception:
            logger.warning("could not wake the run's signal watcher; cancelling it", extra={"run_id": self._run_id})
            return False
        return True

    async def _expire_control_stream(self) -> None:
        try:
            await self._stream.expire(run_control_key(self._tenant_id, self._run_id), CONTROL_TTL_S)
        except Exception:
            logger.warning("could not set the control stream's expiry", extra={"run_id": self._run_id})

    def _cancel(self, via: str, reason: str | None = None) -> None:
        if self.state.cancel_seen_via is None:
            self.state.cancel_seen_via = via
            logger.info("cancel received", extra={"run_id": self._run_id, "via": via})
        self._on_cancel(reason)

    async def _heartbeat(self) -> None:
        while not self._stopping:
            await asyncio.sleep(self._heartbeat_s)
            try:
                run: Run = await self._beat()
            except Exception:
                self.state.failed_beats += 1
                logger.warning("heartbeat failed", extra={"run_id": self._run_id}, exc_info=True)
                continue
            self.state.beats += 1
            if run.status.is_terminal:
                # Another run took the thread over after this run's lease expired, and ended this run: stop, and
                # leave the record and the stream as the takeover left them.
                logger.warning("run was taken over; stopping", extra={"run_id": self._run_id})
                self.state.lost = True
                self._on_cancel()
                return
            if run.cancel_requested:
                self._cancel("ledger")

    async def _signals(self) -> None:
        key = run_control_key(self._tenant_id, self._run_id)
        cursor = "0-0"
        failing = False
        while not self._stopping:
            try:
                entries = await self._stream.read_after(key, cursor, block_ms=self._signal_block_ms)
            except Exception:
                if not failing:
                    logger.warning(
                        "run control signal unreachable; a cancel arrives through the ledger instead",
                        extra={"run_id": self._run_id},
                        exc_info=True,
                    )
                failing = True
                await asyncio.sleep(SIGNAL_RETRY_S)
                continue
            failing = False
            for entry in entries:
                cursor = entry.id
                if entry.event.get("type") == CANCEL_SIGNAL:
                    reason = entry.event.get("reason")
                    self._cancel("signal", reason if isinstance(reason, str) else None)
                    return
