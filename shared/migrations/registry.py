"""Every migration of this release, in the order they run, and the current schema version of each item kind.

A new migration is appended here with the next id; ids never change once released, and a migration is never edited
after it ran somewhere (write a new one). The app's adapters stamp :func:`current_version` on the items they
write, so adding a migration for a kind also moves what the app writes to its ``to_version``.
"""

from __future__ import annotations

from collections.abc import Sequence

from shared.migrations.memory_index import ACTIVE_MEMORY_INDEX
from shared.migrations.message_parents import MESSAGE_PARENTS
from shared.migrations.model import Migration
from shared.migrations.thread_list_index import THREAD_LIST_INDEX
from shared.migrations.thread_previews import THREAD_PREVIEWS

MIGRATIONS: tuple[Migration, ...] = (ACTIVE_MEMORY_INDEX, THREAD_LIST_INDEX, MESSAGE_PARENTS, THREAD_PREVIEWS)


def check_registry(migrations: Sequence[Migration]) -> None:
    """Ids 1, 2, 3... in order, and each migration of a kind moves it to a higher version than the one before."""
    versions: dict[str, int] = {}
    for position, migration in enumerate(migrations, start=1):
        if migration.id != position:
            raise ValueError(f"migration {migration.label}: ids must be 1, 2, 3... in order (expected {position})")
        kind = migration.items.kind
        if migration.to_version <= versions.get(kind, 1):
            raise ValueError(f"migration {migration.label}: to_version must exceed {versions.get(kind, 1)}")
        versions[kind] = migration.to_version


def current_version(kind: str, migrations: Sequence[Migration] = MIGRATIONS) -> int:
    """The schema version the app writes on an item of ``kind``: the last migration's ``to_version``, else 1."""
    return max((m.to_version for m in migrations if m.items.kind == kind), default=1)


def by_id(migration_id: int, migrations: Sequence[Migration] = MIGRATIONS) -> Migration:
    for migration in migrations:
        if migration.id == migration_id:
            return migration
    raise KeyError(f"no migration {migration_id}")


check_registry(MIGRATIONS)
