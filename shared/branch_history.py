"""One branch of a thread as the history API shows it: its messages oldest first, each with its parent and, where
it has some, its siblings (docs/protocols/agent/api-endpoints.md §4).

A thread that never branched is read a page at a time, as it always was: its branch is the whole thread. A thread
that branched (an edit, a regenerate or a switch: ``Thread.branched``) is read whole, up to
:data:`MAX_TREE_MESSAGES`, because the siblings of a message can be anywhere after it; the branch is then paged in
memory with the same cursor (the ``seq`` of a page's last message).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from shared.errors import NotFound
from shared.message_tree import branch_of, parent_of, sibling_ids
from shared.models import PREVIOUS, Message, Thread
from shared.ports import ConversationStore

MAX_TREE_MESSAGES = 10_000
"""The most messages of a branched thread the history reads to find its branches (200 a request)."""
_TREE_PAGE = 200


@dataclass(frozen=True)
class BranchPage:
    """A page of a branch: ``messages`` oldest first with their parents resolved (a message stored before threads
    were trees follows the one stored before it), and the sibling ids of those that have siblings."""

    messages: list[Message]
    more: bool
    """The branch goes on after the page."""
    leaf_id: str | None
    """The branch's last message (None for an empty thread)."""
    siblings: dict[str, tuple[str, ...]] = field(default_factory=dict)


class ForwardReader(Protocol):
    """What :func:`read_tree` needs of a store (``ConversationStore`` has it)."""

    async def read_forward(self, tenant_id: str, thread_id: str, *, after_seq: int, limit: int) -> list[Message]: ...


async def read_tree(threads: ForwardReader, tenant_id: str, thread_id: str) -> list[Message]:
    """Every message of the thread, oldest first (at most :data:`MAX_TREE_MESSAGES`)."""
    messages: list[Message] = []
    while len(messages) < MAX_TREE_MESSAGES:
        after = messages[-1].seq if messages else 0
        page = await threads.read_forward(tenant_id, thread_id, after_seq=after, limit=_TREE_PAGE)
        messages += page
        if len(page) < _TREE_PAGE:
            break
    return messages


async def branch_page(
    threads: ConversationStore, thread: Thread, *, leaf_id: str | None, after_seq: int, limit: int
) -> BranchPage:
    """The page of the branch ending at ``leaf_id`` (None: the thread's current branch) after ``after_seq``.
    ``NotFound`` when ``leaf_id`` is not a message of the thread."""
    tenant, thread_id = thread.tenant_id, thread.thread_id
    if leaf_id is None and not thread.branched:
        # One page, one request, as before branches: the only branch is the whole thread.
        start = max(after_seq - 1, 0)  # one message before the page, to resolve its first message's parent
        read = await threads.read_forward(tenant, thread_id, after_seq=start, limit=limit + (after_seq - start))
        before = read[0] if after_seq > 0 and read and read[0].seq == after_seq else None
        page = read[1:] if before is not None else read
        return BranchPage(_resolved(page, before), len(page) == limit, page[-1].id if page else None)
    everything = await read_tree(threads, tenant, thread_id)
    wanted = leaf_id if leaf_id is not None else thread.leaf_id
    branch = branch_of(everything, wanted)
    if wanted is not None and not branch:
        raise NotFound("message not found")
    siblings = sibling_ids(everything)
    previous = {m.id: before for before, m in zip([None, *everything], everything, strict=False)}
    later = [m for m in branch if m.seq > after_seq]
    page = later[:limit]
    resolved = [m.model_copy(update={"parent_id": parent_of(m, previous[m.id])}) for m in page]
    shown = {m.id: siblings[m.id] for m in page if m.id in siblings}
    return BranchPage(resolved, len(later) > limit, branch[-1].id if branch else None, shown)


def _resolved(page: list[Message], before: Message | None) -> list[Message]:
    out: list[Message] = []
    for msg in page:
        out.append(msg if msg.parent_id != PREVIOUS else msg.model_copy(update={"parent_id": parent_of(msg, before)}))
        before = msg
    return out
