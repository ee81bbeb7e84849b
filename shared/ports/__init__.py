"""Ports: the small async interfaces through which the code reaches everything outside the process.

One module per area: ``threads`` (threads and messages), ``runs`` (the run ledger) and ``audit`` (the audit log),
three aggregates of one DynamoDB table (``store`` declares what a component spanning them needs), ``streams`` (the
Redis event streams), ``model`` (the chat model), ``memory`` (memories, pending extraction, the due queue,
embeddings, the event bus) and ``automation`` (tasks and their schedules). Every port names, in its docstring,
its in-memory fake (all in ``shared.adapters.in_memory``), its adapters and the contract suite in
``tests/contract`` that runs the same cases on both. Adapters live in ``shared.adapters`` and ``shared.llm``.

The ports speak of the domain's value types (``shared.memory.models``, ``shared.automation.models``,
``shared.llm.types``), so this package sits in the domain layer; no module that defines such a type imports it.
The thread, run and stream ports are re-exported here, so ``from shared.ports import EventStream`` works.
"""

from shared.ports.audit import AuditLog
from shared.ports.runs import RunLedger
from shared.ports.streams import BatchEventStream, EventStream, ProbedStream, StreamEntry
from shared.ports.threads import ConversationStore, MessageHistoryReader, ThreadStore

__all__ = [
    "AuditLog",
    "BatchEventStream",
    "ConversationStore",
    "EventStream",
    "MessageHistoryReader",
    "ProbedStream",
    "RunLedger",
    "StreamEntry",
    "ThreadStore",
]
