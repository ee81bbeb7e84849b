"""Migration 4: threads stored before threads had previews get their list preview and message count.

Why: the thread list shows each thread's last visible message (``lastMessage``) and ``messageCount`` (issue 45). The
app keeps them on the thread item as it stores messages (``pending_last``) and copies them into the projected
``last_message`` when a run releases the thread; a thread nobody used since the deploy has neither, and would list
without a preview until its next turn.

Which items change: thread items (``kind = thread``) with messages (``last_seq`` > 0) and neither ``last_message``
nor ``pending_last``. The migration reads the thread's last stored message (``M#{last_seq}``, one strongly
consistent GetItem, ``Migration.neighbour``); when a user sees it (a user's or an assistant's text, not a hidden
run's), it becomes ``last_message`` with the count ``last_seq``. When it is not (a tool result, a hidden run's),
the thread is left as it is: its next turn gives it a preview. A thread used since the deploy is stamped at this
version by its claim and is never visited; its release carries its preview.

``guard`` names every attribute the app changes on a thread item, as migration 2's does: the runner writes the
whole item back, and a claim, an append, a release or a ``PATCH`` in between fails the write, which is retried
from a fresh read.
"""

from __future__ import annotations

from typing import Any

from shared.migrations.model import Item, ItemFilter, Migration
from shared.thread_fields import preview

VISIBLE_ROLES = ("user", "assistant")


def last_message_key(item: Item) -> dict[str, Any] | None:
    """The key of the thread's last stored message; None when it has none or has a preview already."""
    last_seq = int(item.get("last_seq", 0))
    if last_seq <= 0 or "last_message" in item or "pending_last" in item:
        return None
    return {"PK": item["PK"], "SK": f"M#{last_seq:012d}"}


def with_preview(item: Item, last: Item | None) -> dict[str, Any] | None:
    """The thread item with ``last_message`` from its last message ``last``; None when there is nothing to write
    (a preview already, no message, or a message a user does not see)."""
    if "last_message" in item or "pending_last" in item or last is None:
        return None
    meta = last.get("meta") or {}
    content = str(last.get("content", ""))
    if last.get("role") not in VISIBLE_ROLES or meta.get("hidden_from_user") or not content.strip():
        return None
    value = {"role": last["role"], "preview": preview(content), "at": last["created_at"], "count": last["seq"]}
    return {**item, "last_message": value}


THREAD_PREVIEWS = Migration(
    id=4,
    name="thread-previews",
    description="Give threads stored before previews their list preview (last visible message) and message count",
    items=ItemFilter(kind="thread"),
    to_version=3,
    apply=lambda item: None,
    neighbour=last_message_key,
    apply_beside=with_preview,
    guard=(
        "last_seq",
        "active_run_id",
        "active_run_at",
        "updated_at",
        "GSI3SK",
        "leaf_id",
        "branched",
        "title",
        "archived",
        "pinned",
        "pending_last",
        "last_message",
    ),
)
