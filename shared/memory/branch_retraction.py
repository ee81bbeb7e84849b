"""Memory follows the branch: a memory whose only evidence lies on a branch the user edited (or regenerated) away is
retracted (docs/memory.md, "Memories and branches").

Run by every memory extraction of a thread that has branched (``Thread.branched``), before it reads the new
messages. An extraction runs once the thread has been quiet for the memory idle time after its last run, so a
branch left by an edit or a regenerate has stopped being current for at least that long when this looks at it. A
memory is retracted (never deleted: its status says why, ``statusReason``) when every one of its
``sourceMessageIds`` is a message of this thread and none of them is on the current branch. A memory with evidence
on the current branch, or in another thread, stays. Switching back to the old branch does not bring a retracted
memory back: the next extraction may propose it again from what the user writes.
"""

from __future__ import annotations

import logging

from shared.branch_history import ForwardReader, read_tree
from shared.memory.models import Deactivation, MemoryStatus
from shared.memory.ports import MemoryStore
from shared.message_tree import branch_of
from shared.models import Identity, Thread

logger = logging.getLogger(__name__)

ABANDONED_BRANCH_REASON = (
    "its only evidence is on a branch of the conversation that is no longer current (the message was edited or "
    "the answer regenerated)"
)


async def retract_abandoned(
    threads: ForwardReader, memories: MemoryStore, identity: Identity, thread: Thread, *, run_id: str
) -> list[str]:
    """Retract the user's active memories whose evidence is only on ``thread``'s abandoned branches; their ids."""
    if not thread.branched:
        return []
    tenant, user = identity.tenant_id, identity.user_id
    everything = await read_tree(threads, tenant, thread.thread_id)
    in_thread = {m.id for m in everything}
    current = {m.id for m in branch_of(everything, thread.leaf_id)}
    retracted: list[str] = []
    for memory in await memories.list_memories(tenant, user):
        sources = set(memory.source_message_ids)
        if not memory.is_active or not sources or not sources <= in_thread or sources & current:
            continue
        change = Deactivation(
            status=MemoryStatus.RETRACTED,
            reason=ABANDONED_BRANCH_REASON,
            run_id=run_id,
            evidence_quote="",
            source_message_ids=tuple(sorted(sources)),
        )
        if await memories.deactivate(tenant, user, memory.id, change) is not None:
            retracted.append(memory.id)
    if retracted:
        logger.info(
            "memories retracted with an abandoned branch",
            extra={"run_id": run_id, "thread_id": thread.thread_id, "memory_ids": retracted},
        )
    return retracted
