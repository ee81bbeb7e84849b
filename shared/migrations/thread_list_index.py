"""Migration 2: thread items move from ``GSI1`` (which projects whole items) to the thread-list index (``GSI3``,
which projects only what the thread list returns).

Why: ``GSI1`` projects every attribute, so each change of a thread item (its message counter on every append, its
claim by a run) was an index write too, and every append moved its sort key besides: 7 to 13 index write units a
turn (docs/scaling.md §3.6). Since this release a thread item carries ``GSI3PK``/``GSI3SK`` instead of
``GSI1PK``/``GSI1SK``, only the release at a run's end moves it, and what moves is a small entry (2 write units a
turn; shared/adapters/aws/table_schema.py ``THREAD_LIST_ATTRIBUTES``).

For each thread item (``kind = thread``) below version 2: sets ``GSI3PK`` (the user's thread list, the value
``GSI1PK`` held) and ``GSI3SK = {updated_at}#{thread}``, removes ``GSI1PK``/``GSI1SK``, at version 2. An item
not in ``GSI1`` is left as it is (``apply`` returns None). The app moves a thread itself when a run claims
it (``DynamoDBThreads.open_and_claim``), so the migration is left with the threads nobody used since the deploy.

The runner writes the whole item back (``PutItem``), so ``guard`` names every attribute the app changes on a thread
item: a claim, an append or a release between the scan's read and the write fails the write's condition, and the
item is read again and migrated from what the app wrote.
"""

from __future__ import annotations

from typing import Any

from shared.migrations.model import Item, ItemFilter, Migration

OLD_KEYS = ("GSI1PK", "GSI1SK")


def move_to_thread_list_index(item: Item) -> dict[str, Any] | None:
    """The thread item in the thread-list index and out of ``GSI1``; None when it is not in ``GSI1`` (moved
    already, by the app's claim or a run of this migration, or never listed)."""
    if "GSI1PK" not in item or "GSI1SK" not in item:
        return None
    new = {key: value for key, value in item.items() if key not in OLD_KEYS}
    new["GSI3PK"] = item["GSI1PK"]
    has_time = "updated_at" in item and "thread_id" in item
    new["GSI3SK"] = f"{item['updated_at']}#{item['thread_id']}" if has_time else item["GSI1SK"]
    return new


THREAD_LIST_INDEX = Migration(
    id=2,
    name="thread-list-index",
    description="Move thread items from GSI1 (projects ALL) to GSI3 (projects the thread list's attributes only)",
    items=ItemFilter(kind="thread"),
    to_version=2,
    apply=move_to_thread_list_index,
    guard=("last_seq", "active_run_id", "active_run_at", "updated_at", "GSI1SK", "GSI3SK", "leaf_id", "branched"),
)
