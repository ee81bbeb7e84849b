"""The migration port: the table's record of completed migrations.

Their value types live in ``shared.migrations.model`` (which imports no port).
"""

from __future__ import annotations

from typing import Protocol

from shared.migrations.model import CompletedMigration


class MigrationLog(Protocol):
    """Which migrations the table records as completed (the registry item the runner writes last).

    Fake: ``InMemoryMigrationLog`` (shared/migrations/log.py); adapter: ``DynamoDBMigrationLog``
    (shared/adapters/aws/migration_state.py); contract: tests/contract/test_migration_log_contract.py."""

    async def completed(self) -> dict[int, CompletedMigration]:
        """The completed migrations by id (empty on a table no migration has run on)."""
        ...

    async def record_completed(self, record: CompletedMigration) -> None:
        """Record a migration as completed (recording it again replaces the record)."""
        ...
