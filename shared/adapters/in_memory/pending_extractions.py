"""The per-thread pending-extraction marker, in memory: the reference implementation of the port
``shared.memory.ports.PendingExtractions`` (the marker is ``shared.memory.models.PendingExtraction``).

One marker per thread (DynamoDB: ``PK = T#{tenant}#TH#{thread}``, ``SK = MEMPENDING``) holds

- ``generation``: bumped by every run-completed event (one atomic ``ADD``). A delayed "extraction due" message
  carries the generation it was sent for; only the message whose generation is still the current one fires, so
  of a burst of events only the last one's message (sent ``idle_s`` after the last turn) extracts: the debounce;
- ``running_run_id`` / ``lease_until``: the memory run in flight, taken with a conditional write, so at most one
  memory run per thread runs at a time; the lease outlives the memory function's timeout, so a crashed run does
  not block the thread for ever.

Deleting the marker (thread deletion) cancels whatever is pending: a due message without a marker is dropped,
and nothing can take the lease. A user's deletion writes a per-user cancel time: markers noted before it never
fire.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from shared.memory.models import PendingExtraction


class InMemoryPendingExtractions:
    """The reference implementation (unit tests, the evaluation harness, the conformance suite)."""

    def __init__(self) -> None:
        self._markers: dict[tuple[str, str], PendingExtraction] = {}
        self._user_cancels: dict[tuple[str, str], datetime] = {}

    async def note(self, tenant_id: str, user_id: str, thread_id: str, *, now: datetime) -> int:
        key = (tenant_id, thread_id)
        current = self._markers.get(key)
        if current is None:
            current = PendingExtraction(tenant_id, thread_id, user_id, 0, now)
        updated = replace(current, generation=current.generation + 1, noted_at=now, user_id=user_id)
        self._markers[key] = updated
        return updated.generation

    async def get(self, tenant_id: str, thread_id: str) -> PendingExtraction | None:
        return self._markers.get((tenant_id, thread_id))

    async def acquire(
        self, tenant_id: str, thread_id: str, run_id: str, *, now: datetime, lease_until: datetime
    ) -> bool:
        current = self._markers.get((tenant_id, thread_id))
        if current is None:
            return False
        if current.running(now) and current.running_run_id != run_id:
            return False
        self._markers[(tenant_id, thread_id)] = replace(current, running_run_id=run_id, lease_until=lease_until)
        return True

    async def hold(
        self, tenant_id: str, user_id: str, thread_id: str, run_id: str, *, now: datetime, lease_until: datetime
    ) -> bool:
        key = (tenant_id, thread_id)
        self._markers.setdefault(key, PendingExtraction(tenant_id, thread_id, user_id, 0, now))
        return await self.acquire(tenant_id, thread_id, run_id, now=now, lease_until=lease_until)

    async def release(self, tenant_id: str, thread_id: str, run_id: str) -> None:
        current = self._markers.get((tenant_id, thread_id))
        if current is not None and current.running_run_id == run_id:
            self._markers[(tenant_id, thread_id)] = replace(current, running_run_id=None, lease_until=None)

    async def cancel_thread(self, tenant_id: str, thread_id: str) -> None:
        self._markers.pop((tenant_id, thread_id), None)

    async def cancel_user(self, tenant_id: str, user_id: str, *, now: datetime) -> None:
        self._user_cancels[(tenant_id, user_id)] = now

    async def user_cancelled_at(self, tenant_id: str, user_id: str) -> datetime | None:
        return self._user_cancels.get((tenant_id, user_id))
