"""The migration ports: the table's record of completed migrations, and a function's asynchronous self-invocation.

Their value types live in ``shared.migrations.model`` (which imports no port).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from shared.migrations.model import CompletedMigration


class MigrationLog(Protocol):
    """Which migrations the table records as completed (the registry item the runner writes last).

    Fake: ``InMemoryMigrationLog`` (shared/adapters/in_memory/migration_log.py); adapter: ``DynamoDBMigrationLog``
    (shared/adapters/aws/migration_state.py); contract: tests/contract/test_migration_log_contract.py."""

    async def completed(self) -> dict[int, CompletedMigration]:
        """The completed migrations by id (empty on a table no migration has run on)."""
        ...

    async def record_completed(self, record: CompletedMigration) -> None:
        """Record a migration as completed (recording it again replaces the record)."""
        ...


class FunctionInvoker(Protocol):
    """Starts a function again, asynchronously, with a payload: how the migration function hands its remaining work
    to a fresh invocation before its own timeout.

    Fake: ``RecordingInvoker`` (shared/adapters/in_memory/invoker.py); adapter: ``LambdaInvoker``
    (shared/adapters/aws/function_invoker.py); contract: tests/contract/test_function_invoker_contract.py."""

    async def invoke_async(self, function: str, payload: Mapping[str, Any]) -> None:
        """Queue one invocation of ``function`` (a name or ARN) with ``payload`` as its event; do not wait for it."""
        ...
