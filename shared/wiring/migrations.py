"""The migration function's parts: the runner of the registry's migrations, and the invoker it hands work on with."""

from __future__ import annotations

from typing import TYPE_CHECKING

from shared.wiring.overrides import overridable
from shared.wiring.stores import StoreProviders

if TYPE_CHECKING:
    from shared.adapters.aws.migration_runner import MigrationRunner, RunnerOptions
    from shared.migrations.ports import FunctionInvoker


class MigrationProviders(StoreProviders):
    """Table migrations, on the main table's client."""

    def migration_runner(self, options: RunnerOptions | None = None, *, owner: str | None = None) -> MigrationRunner:
        """A runner of the registry's migrations on the table, with ``options`` or the ``MIGRATION_*`` settings."""
        from shared.adapters.aws.migration_runner import MigrationRunner, RunnerOptions

        settings = self.settings
        defaults = RunnerOptions(
            segments=settings.migration_segments,
            page_size=settings.migration_page_size,
            rate_wcu=settings.migration_rate_wcu,
        )
        return MigrationRunner(settings.table_name, self.dynamodb_client, options or defaults, owner=owner)

    @overridable("function_invoker")
    def function_invoker(self) -> FunctionInvoker:
        """Asynchronous Lambda invocations (the migration function hands its remaining work to a new one)."""
        from shared.adapters.aws.clients import client_factory
        from shared.adapters.aws.function_invoker import LambdaInvoker

        return LambdaInvoker(client_factory("lambda", region=self.settings.aws_region))
