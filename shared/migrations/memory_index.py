"""Migration 1: the backfill of the sparse index of active memories (``GSI1``, ``T#...#U#...#MEM#ACTIVE``).

Why: since the bounded memory read (commit "Bounded memory reads"), the worker reads a user's active memories with
one Query of ``GSI1``, and ``DynamoDBMemoryStore`` writes ``GSI1PK``/``GSI1SK`` on every active memory it writes.
Memory items written before that carry neither attribute, so an active memory stored then is invisible to the
index read until it is written again. This migration writes them: for each memory item (``kind = memory``) it
sets ``GSI1PK = {PK}#ACTIVE`` and ``GSI1SK = {updated_at}#{id}`` when the memory is active, and removes both when
it is not (a memory deactivated by a writer that left them behind must leave the index), at version 2.

Which items change: active memories without the index attributes (all written before the bounded read). Memories
written after it but before versioning already have the right attributes and are left as they are (``apply``
returns None), as are inactive memories without them. ``tests/integration/test_migration_runner.py`` checks that
the output is exactly what today's adapter writes for the same memory.
"""

from __future__ import annotations

from typing import Any

from shared.memory.models import Memory
from shared.migrations.model import SCHEMA_VERSION, Item, ItemFilter, Migration

INDEX_KEYS = ("GSI1PK", "GSI1SK")


def index_active_memory(item: Item) -> dict[str, Any] | None:
    """The memory item with its index attributes as its status wants them; None when they already are."""
    memory = Memory.model_validate_json(item["data"])
    new = {key: value for key, value in item.items() if key not in INDEX_KEYS}
    if memory.is_active:
        new["GSI1PK"] = f"{item['PK']}#ACTIVE"
        new["GSI1SK"] = f"{memory.updated_at.isoformat()}#{memory.id}"
    if _without_version(new) == _without_version(item):
        return None
    return new


def _without_version(item: Item) -> dict[str, Any]:
    return {key: value for key, value in item.items() if key != SCHEMA_VERSION}


ACTIVE_MEMORY_INDEX = Migration(
    id=1,
    name="active-memory-index",
    description="Backfill GSI1PK/GSI1SK on active memories written before the bounded memory read (index-only read)",
    items=ItemFilter(kind="memory"),
    to_version=2,
    apply=index_active_memory,
    guard=("data", "status"),
)
