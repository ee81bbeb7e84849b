"""Ends a run that a reader finds dead: still ``running`` in the ledger, its lease expired, not executing here.

A run's process can stop without recording its end (a Lambda environment frozen after its client left, a timeout, a
crash). A new message on its thread takes the thread over and repairs it (``shared.runs.admission``), and the
sweeper ends it after minutes. A reader of that run (``GET /runs/{runId}/events``, a reconnect with Last-Event-ID)
would otherwise get only pings until one of those came. So the tail asks this module once the run's lease has
expired: the run is ended with the same repair as a takeover (``RunSweeper.end_run``, ``reason="lease_expired"``,
audited as ``run_swept`` with ``ended_by: "reader"``): ledger ``failed`` with ``run_failed``, its unsaved text
stored, its dangling tool calls answered, its stream closed with ``RUN_ERROR`` ``run_failed``, its thread released
and its concurrency slot freed. The ledger write is conditional on the stale heartbeat, so of two readers (or a
reader and a takeover) exactly one repairs, and a run that was only slow and beats again is left alone.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from shared.limits.gate import LimitGate
from shared.models import Run, RunStatus, utc_now
from shared.ports import AuditLog, EventStream, RunLedger, ThreadStore

logger = logging.getLogger(__name__)

LEASE_CHECK_SLACK_S = 0.25
"""How long after a lease's expiry a reader looks again (the heartbeat's write may be a moment late)."""


class DeadRuns:
    """Decides whether a run a reader waits on is dead, and ends it with the takeover's repair."""

    def __init__(
        self,
        threads: ThreadStore,
        runs: RunLedger,
        audit: AuditLog,
        stream: EventStream,
        *,
        lease: timedelta,
        limits: LimitGate | None = None,
    ) -> None:
        self._threads = threads
        self._runs = runs
        self._audit = audit
        self._stream = stream
        self._lease = lease
        self._limits = limits

    def lease_expires_at(self, run: Run) -> datetime:
        """When the run's lease ends unless its heartbeat renews it."""
        return run.heartbeat_at + self._lease

    def seconds_until_expiry(self, run: Run) -> float:
        """How long a reader may wait before looking at the run's lease again (never below the slack)."""
        left = (self.lease_expires_at(run) - utc_now()).total_seconds()
        return max(left, 0.0) + LEASE_CHECK_SLACK_S

    def is_dead(self, run: Run) -> bool:
        return run.status is RunStatus.RUNNING and self.lease_expires_at(run) < utc_now()

    async def end(self, run: Run) -> bool:
        """End a dead run as a takeover would; False when it is alive, or another reader or a takeover did."""
        if not self.is_dead(run):
            return False
        # Imported here: only a dead run needs the sweeper's repair, so a function's start-up does not load it.
        from shared.runs.sweeper import RunSweeper, SweepReport

        cutoff = utc_now() - self._lease
        logger.warning(
            "a reader found a run whose lease expired; ending it",
            extra={"run_id": run.run_id, "heartbeat_at": run.heartbeat_at.isoformat()},
        )
        sweeper = RunSweeper(
            self._threads,
            self._runs,
            self._audit,
            self._stream,
            on_run_ended=self._limits.ended if self._limits else None,
        )
        return await sweeper.end_run(run, cutoff, SweepReport(), reason="lease_expired", ended_by="reader")
