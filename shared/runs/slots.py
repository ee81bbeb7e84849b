"""A user's concurrency slots freed from runs that no longer run, when a reservation is refused for want of one.

A run frees its slot when it settles. A run whose process froze or died never settles: its slot is freed by the
same lease rule that frees its thread. The sweeper ends such a run on its schedule (and frees its slot, through
``RunSweeper``'s ``on_run_ended``); and a refused reservation (``too_many_runs``) looks at the runs holding the
user's slots first: a run that ended without freeing its slot gives it back at once, and a run whose heartbeat is
older than the lease is ended as a takeover ends it (``RunSweeper.end_run``) and gives its slot back. Only then is
the request refused. This costs reads on the refusal path only.

A slot whose run was never stored (its process died between the reservation and the write) is freed when a
refusal in this process has seen it without a run for longer than the lease.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from shared.limits.gate import LimitGate
from shared.limits.windows import Windows
from shared.models import Identity, utc_now
from shared.ports import AuditLog, EventStream, RunLedger, ThreadStore

logger = logging.getLogger(__name__)

MAX_CHECKED = 20
"""Slot holders a refusal looks at (a user's concurrency limit is small)."""


class StaleSlots:
    """Frees a user's slots held by runs that no longer run (the module docstring says which)."""

    def __init__(
        self,
        gate: LimitGate,
        threads: ThreadStore,
        runs: RunLedger,
        audit: AuditLog,
        stream: EventStream,
        *,
        lease: timedelta,
    ) -> None:
        """``threads``, ``runs``, ``audit``: what the sweeper's repair of a stale slot's run writes."""
        self._gate = gate
        self._threads = threads
        self._runs = runs
        self._audit = audit
        self._stream = stream
        self._lease = lease
        self._missing_since: dict[str, datetime] = {}

    async def free(self, identity: Identity) -> int:
        """Free what can be freed of the user's slots; the number freed."""
        # Leases are judged on the wall clock the heartbeats write; the counters' windows on the gate's clock.
        now = utc_now()
        windows = Windows.at(self._gate.now())
        view = await self._gate.counters.counters(identity.tenant_id, "user", identity.user_id, windows)
        freed = 0
        for run_id in sorted(view.active_runs)[:MAX_CHECKED]:
            try:
                if await self._free_one(identity, run_id, now):
                    freed += 1
            except Exception:
                logger.warning("could not check a slot's run", extra={"run_id": run_id}, exc_info=True)
        return freed

    async def _free_one(self, identity: Identity, run_id: str, now: datetime) -> bool:
        run = await self._runs.get_run(identity.tenant_id, run_id)
        if run is None:
            first_seen = self._missing_since.setdefault(run_id, now)
            if now - first_seen <= self._lease:
                return False  # most likely a run being admitted right now
            self._missing_since.pop(run_id, None)
        elif not run.status.is_terminal:
            cutoff = now - self._lease
            if run.heartbeat_at >= cutoff:
                return False
            # Imported here: only a stale slot needs the sweeper's repair (as a takeover does).
            from shared.runs.sweeper import RunSweeper, SweepReport

            sweeper = RunSweeper(self._threads, self._runs, self._audit, self._stream, on_run_ended=self._gate.ended)
            await sweeper.end_run(run, cutoff, SweepReport(), reason="lease_expired")
        logger.warning("freeing a slot whose run no longer runs", extra={"run_id": run_id})
        await self._gate.release_slot(identity.tenant_id, identity.user_id, run_id)
        return True
