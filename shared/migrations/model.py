"""What a migration is: the items it looks at, the version it brings them to, and a pure change of one item.

Items carry their schema version in :data:`SCHEMA_VERSION` (a Number). An item without it was written before its
kind was versioned and is version 1. The app writes the current version of a kind (``registry.current_version``)
on every item it writes, so an item the app wrote since the deploy is never migrated again, and the runner's
conditional write ("the version is still the one I read") fails when the app wrote the item in between.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

SCHEMA_VERSION = "schema_v"
"""The item attribute holding its schema version (absent: 1)."""

Item = Mapping[str, Any]
"""An item's attributes as plain values (strings, ``Decimal`` numbers, maps), as boto3's deserializer gives them."""


def item_version(item: Item) -> int:
    """The item's schema version: its :data:`SCHEMA_VERSION`, or 1 when it has none."""
    return int(item.get(SCHEMA_VERSION, 1))


@dataclass(frozen=True, slots=True)
class ItemFilter:
    """Which items a migration looks at: an item ``kind`` (every item of the table carries one), optionally
    narrowed to partition keys starting with ``key_prefix``. The runner turns it into a scan filter; ``matches``
    is the same test on an item in hand (a re-read item, the in-memory tests)."""

    kind: str
    key_prefix: str | None = None

    def matches(self, item: Item) -> bool:
        if item.get("kind") != self.kind:
            return False
        return self.key_prefix is None or str(item.get("PK", "")).startswith(self.key_prefix)


@dataclass(frozen=True, slots=True)
class Migration:
    """One versioned change of the items ``items`` selects, from any version below ``to_version`` to it.

    ``apply`` takes an item (plain values) and returns the whole new item, or None when the item already has the
    new shape (nothing is written then). It must be pure and deterministic: the runner may call it again on a
    fresh read after a conflicting write. The runner sets :data:`SCHEMA_VERSION` on what it returns. ``guard``
    names attributes ``apply`` reads besides the version: the write is also conditioned on them being unchanged,
    so a writer that does not stamp versions (code deployed before this one) is not overwritten either.
    """

    id: int
    name: str
    description: str
    items: ItemFilter
    to_version: int
    apply: Callable[[Item], dict[str, Any] | None]
    guard: tuple[str, ...] = ()
    neighbour: Callable[[Item], dict[str, Any] | None] | None = None
    """The key of one more item the change needs (migration 3: the message stored before), or None for an item that
    needs none; the runner reads it (strongly consistent) and calls ``apply_beside`` with it (None: it is gone)."""
    apply_beside: Callable[[Item, Item | None], dict[str, Any] | None] | None = None

    def migrate(self, item: Item, read: Callable[[dict[str, Any]], Item | None]) -> dict[str, Any] | None:
        """``apply``, or ``apply_beside`` with the neighbour ``read`` fetched."""
        key = self.neighbour(item) if self.neighbour is not None else None
        if key is None or self.apply_beside is None:
            return self.apply(item)
        return self.apply_beside(item, read(key))

    @property
    def label(self) -> str:
        """``0001-active-memory-index``: the id and the name, as the CLI, the logs and ``/healthz`` show it."""
        return f"{self.id:04d}-{self.name}"


@dataclass(frozen=True, slots=True)
class CompletedMigration:
    """A migration the table records as completed: every item it selects was migrated (or needed nothing)."""

    id: int
    name: str
    completed_at: datetime
    changed: int
    scanned: int
