"""Migration 3: every message gets its ``parent_id``, so the threads stored before threads were trees are trees.

Why: an edit or a regenerate adds a sibling (``shared.message_tree``), and every reader of "the conversation"
reads one branch by following parents from the thread's leaf. A message stored before that has no ``parent_id``
and reads as "the message stored just before me" (``PREVIOUS``), which is right for a thread with one branch, but
the history API has no id to show as its ``parentId``. This migration writes it: the stored order is the one
branch, so a message's parent is the message stored just before it (``seq - 1``), and the first message (or one
whose predecessor is gone) gets the stored root marker ``""``. The thread item needs nothing: a thread without a
leaf reads from its newest message.

Which items change: messages (``kind = message``) without ``parent_id``. A message written since the deploy has
it (and the version), and is left as it is. The migration reads the previous message of each (one strongly
consistent GetItem, ``Migration.neighbour``).
"""

from __future__ import annotations

from typing import Any

from shared.migrations.model import Item, ItemFilter, Migration

ROOT_PARENT = ""
"""The stored parent of a thread's first message (as ``dynamo_codec.ROOT_PARENT``)."""


def previous_message_key(item: Item) -> dict[str, Any] | None:
    """The key of the message stored just before ``item`` (the item keys of ``dynamo_codec.msg_sk``)."""
    seq = int(item["seq"])
    if "parent_id" in item or seq <= 1:
        return None
    return {"PK": item["PK"], "SK": f"M#{seq - 1:012d}"}


def link_to_previous(item: Item, previous: Item | None) -> dict[str, Any] | None:
    """The message item with ``parent_id`` set to ``previous``'s id (the root marker when there is none); None
    when it has one already."""
    if "parent_id" in item:
        return None
    parent = str(previous["id"]) if previous is not None and "id" in previous else ROOT_PARENT
    return {**item, "parent_id": parent}


MESSAGE_PARENTS = Migration(
    id=3,
    name="message-parents",
    description="Set parent_id on messages stored before threads were trees (the stored order is the one branch)",
    items=ItemFilter(kind="message"),
    to_version=2,
    apply=lambda item: link_to_previous(item, None),
    neighbour=previous_message_key,
    apply_beside=link_to_previous,
    guard=("parent_id",),
)
