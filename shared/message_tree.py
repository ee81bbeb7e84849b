"""A thread as a tree of messages: linking new messages to the current leaf, and walking one branch.

Every stored message has a parent (``Message.parent_id``; None for a first message). A thread's **current branch**
is the path from its first message to its current leaf (``Thread.leaf_id``; None: its newest message). Everything
that reads "the conversation" (the model's window, the history, the memory executor's input, the messages
snapshot) reads that branch and nothing else, so an edit or a regenerate never shows the model what it replaced.

The store never moves or rewrites a message: an edit or a regenerate only adds a sibling, and a switch only moves
the leaf. Because a message is always stored after its parent, walking the thread newest first (by ``seq``) and
following parents from the leaf visits the branch in order, skipping the other branches' messages as it meets them:
the same paged ``read_back`` the window always did, with a filter on top (:class:`BranchWalk`).

Pure functions, no I/O: the adapters call :func:`link_messages` when they number an append; the readers filter
with :class:`BranchWalk` or build the whole tree with :func:`branch_of` and :func:`sibling_ids`.
"""

from __future__ import annotations

from collections.abc import Sequence

from shared.models import PREVIOUS, Message


def link_messages(messages: Sequence[Message], *, leaf_id: str | None, last_seq: int) -> list[Message]:
    """``messages`` (in append order) with their parents resolved: a message that follows whatever came before
    (``PREVIOUS``) follows the message before it in this append, or, for the first one, the thread's current leaf.

    ``leaf_id``: the thread's current leaf (None: its newest message, which is unknown here; the link then stays
    ``PREVIOUS``, read as "the message stored just before", except on an empty thread, where it is a first message).
    A message with an explicit parent (an edit) keeps it."""
    previous: str | None = leaf_id if leaf_id is not None else (None if last_seq == 0 else PREVIOUS)
    linked: list[Message] = []
    for msg in messages:
        parent = previous if msg.parent_id == PREVIOUS else msg.parent_id
        linked.append(msg if parent == msg.parent_id else msg.model_copy(update={"parent_id": parent}))
        previous = msg.id
    return linked


def branches_off(messages: Sequence[Message]) -> bool:
    """Whether an append adds a branch: one of its messages names a parent of its own (an edit)."""
    return any(m.parent_id != PREVIOUS for m in messages)


class BranchWalk:
    """Fed a thread's messages newest first (by ``seq``), says which are on the branch that ends at ``leaf_id``
    (None: the newest message), and when the branch's first message has been seen."""

    def __init__(self, leaf_id: str | None) -> None:
        self._want: str | None = leaf_id
        """The next message of the branch (going back); None: whatever message comes next."""
        self.complete = False
        """The branch's first message was seen: nothing older is on it."""

    def take(self, msg: Message) -> bool:
        """Whether ``msg`` is on the branch (the messages must come newest first, without gaps in ``seq``)."""
        if self.complete or (self._want is not None and msg.id != self._want):
            return False
        if msg.parent_id is None:
            self.complete = True
        self._want = None if msg.parent_id == PREVIOUS else msg.parent_id
        return True


def on_branch(newest_first: Sequence[Message], leaf_id: str | None) -> list[Message]:
    """The messages of ``newest_first`` (consecutive, newest first) on the branch ending at ``leaf_id``, newest
    first: what admission's read of the newest messages holds of the current branch."""
    walk = BranchWalk(leaf_id)
    return [m for m in newest_first if walk.take(m)]


def branch_of(messages: Sequence[Message], leaf_id: str | None) -> list[Message]:
    """The branch ending at ``leaf_id`` (None: the newest message), oldest first, from all of a thread's
    ``messages`` (oldest first). Empty when ``leaf_id`` is not among them."""
    walk = BranchWalk(leaf_id)
    return [m for m in reversed(messages) if walk.take(m)][::-1]


def parent_of(msg: Message, before: Message | None) -> str | None:
    """``msg``'s parent id, ``PREVIOUS`` resolved with ``before`` (the message stored just before it)."""
    if msg.parent_id != PREVIOUS:
        return msg.parent_id
    return before.id if before is not None else None


def sibling_ids(messages: Sequence[Message]) -> dict[str, tuple[str, ...]]:
    """For each message of a thread (``messages``: all of them, oldest first) that has siblings: the ids of its
    parent's children, its own included, oldest first."""
    children: dict[str | None, list[str]] = {}
    before: Message | None = None
    for msg in messages:
        children.setdefault(parent_of(msg, before), []).append(msg.id)
        before = msg
    return {mid: tuple(ids) for ids in children.values() if len(ids) > 1 for mid in ids}


def newest_leaf_under(messages: Sequence[Message], message_id: str) -> str | None:
    """The leaf reached from ``message_id`` by always following its newest child (``messages``: all of a thread's,
    oldest first): where a chat UI lands when the user picks a sibling. None when ``message_id`` is not there."""
    children: dict[str | None, list[str]] = {}
    before: Message | None = None
    for msg in messages:
        children.setdefault(parent_of(msg, before), []).append(msg.id)
        before = msg
    if not any(m.id == message_id for m in messages):
        return None
    current = message_id
    while children.get(current):
        current = children[current][-1]
    return current
