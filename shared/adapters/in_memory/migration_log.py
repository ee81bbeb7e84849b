"""The migration log in memory: the reference implementation of ``shared.migrations.ports.MigrationLog``."""

from __future__ import annotations

from shared.migrations.model import CompletedMigration


class InMemoryMigrationLog:
    """Unit tests of what reads the log (``PendingMigrations``); ``fail_with`` makes every read raise it."""

    def __init__(self) -> None:
        self._completed: dict[int, CompletedMigration] = {}
        self.reads = 0
        self.fail_with: Exception | None = None

    async def completed(self) -> dict[int, CompletedMigration]:
        self.reads += 1
        if self.fail_with is not None:
            raise self.fail_with
        return dict(self._completed)

    async def record_completed(self, record: CompletedMigration) -> None:
        self._completed[record.id] = record
