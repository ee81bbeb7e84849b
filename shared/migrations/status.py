"""What the deployed code expects of the table and the table has not completed yet, read cheaply.

``GET /healthz`` shows it, and the memory store asks it which reader the migration window needs (until migration 1
completes, active memories written before the bounded read are not in the index). So it must never slow either
down: the table's log is read at most once per ``ttl_s`` (after a failed read, ``retry_s``), each read is cut off
after ``timeout_s`` (the previous answer stands; before any answer everything counts as pending, which only
selects the slower reader that is right either way), concurrent callers share the answer in hand instead of
reading again, and once nothing is pending it is never read again: a completed migration stays completed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from shared.migrations.model import Migration
from shared.migrations.ports import MigrationLog
from shared.migrations.registry import MIGRATIONS

logger = logging.getLogger(__name__)

STATUS_TTL_S = 300.0
RETRY_AFTER_FAILURE_S = 30.0
READ_TIMEOUT_S = 0.5


@dataclass(frozen=True, slots=True)
class MigrationStatus:
    """The migrations this code expects, those the table records as completed, and whether it was read at all."""

    expected: tuple[Migration, ...]
    completed: frozenset[int]
    checked: bool

    @property
    def pending(self) -> list[str]:
        """Labels of the expected migrations not recorded as completed, in the order they run."""
        return [m.label for m in self.expected if m.id not in self.completed]

    def is_complete(self, migration_id: int) -> bool:
        return migration_id in self.completed

    def as_health(self) -> dict[str, Any]:
        """``/healthz``'s ``migrations`` field: ``pending`` labels, and ``checked`` false when the table could not
        be read yet (then every expected migration is listed)."""
        return {"pending": self.pending, "checked": self.checked}


class PendingMigrations:
    """The cached :class:`MigrationStatus` of one process (one per Lambda environment, built by the wiring)."""

    def __init__(
        self,
        log: MigrationLog,
        expected: Sequence[Migration] = MIGRATIONS,
        *,
        ttl_s: float = STATUS_TTL_S,
        retry_s: float = RETRY_AFTER_FAILURE_S,
        timeout_s: float = READ_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = log
        self._status = MigrationStatus(tuple(expected), frozenset(), checked=False)
        self._ttl_s, self._retry_s, self._timeout_s = ttl_s, retry_s, timeout_s
        self._clock = clock
        self._next_read_at = clock()
        self._reading = False

    def cached(self) -> MigrationStatus:
        """The answer in hand, without reading."""
        return self._status

    async def status(self) -> MigrationStatus:
        """The answer in hand, read again first when it is due (and nobody is reading it already)."""
        if self._due():
            await self._read()
        return self._status

    async def completed(self, migration_id: int) -> bool:
        """Whether the table records ``migration_id`` as completed (no read once it does)."""
        if self._status.is_complete(migration_id):
            return True
        return (await self.status()).is_complete(migration_id)

    def _due(self) -> bool:
        return bool(self._status.pending) and not self._reading and self._clock() >= self._next_read_at

    async def _read(self) -> None:
        self._reading = True
        try:
            done = await asyncio.wait_for(self._log.completed(), timeout=self._timeout_s)
        except Exception as exc:  # never fail a health check or a memory read over this
            logger.info("could not read the migration log", extra={"reason": type(exc).__name__})
            self._next_read_at = self._clock() + self._retry_s
            return
        finally:
            self._reading = False
        self._status = MigrationStatus(self._status.expected, frozenset(done), checked=True)
        self._next_read_at = self._clock() + self._ttl_s
