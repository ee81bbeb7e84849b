"""Versioned data migrations of the single table: what each one changes, in code, next to the shapes it moves.

A migration (:class:`~shared.migrations.model.Migration`) names the items it looks at (an item kind, as a scan
filter), the schema version it brings them to, and a pure ``apply(item) -> item | None`` on the item's plain
attributes (no boto3 here). The runner that scans the table, writes conditionally, throttles and checkpoints is an
adapter (``shared.adapters.aws.migration_runner``); what the deployed code expects and what has completed is read
through the ``MigrationLog`` port (``shared.migrations.ports``) and cached by :class:`PendingMigrations`.

- ``model``: ``Migration``, ``ItemFilter``, ``CompletedMigration``, the schema version attribute;
- ``registry``: every migration of this release, in order, and the current version of each item kind;
- ``memory_index``: migration 1, the backfill of the active-memories index;
- ``status``: ``MigrationStatus`` and ``PendingMigrations`` (``/healthz``, the memory read's choice of reader).

The port's fake, ``InMemoryMigrationLog``, is with the other fakes in ``shared.adapters.in_memory``.

How to write and run one: docs/storage.md "Migrations".
"""

from shared.migrations.model import SCHEMA_VERSION, CompletedMigration, ItemFilter, Migration, item_version
from shared.migrations.registry import MIGRATIONS, current_version

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "CompletedMigration",
    "ItemFilter",
    "Migration",
    "current_version",
    "item_version",
]
