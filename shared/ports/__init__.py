"""Ports: the small async interfaces through which the code reaches everything outside the process.

One module per area: ``threads`` (threads and messages), ``runs`` (the run ledger) and ``audit`` (the audit log),
three aggregates of one DynamoDB table (each component is given the ones it uses), ``streams`` (the
Redis event streams), ``model`` (the chat model), ``config`` (the runtime configuration) and ``thread_state``.
Every port names, in its docstring, its in-memory fake (all in ``shared.adapters.in_memory``), its adapters and the
contract suite in ``tests/contract`` that runs the same cases on both. Adapters live in ``shared.adapters`` and
``shared.llm``.

These ports speak only of base types (``shared.models``, ``shared.llm.types``, ``shared.thread_state.models``), so
every package may use them. A port whose values belong to one domain package lives in that package, beside its
types: ``shared.memory.ports``, ``shared.automation.ports``, ``shared.limits.ports``, ``shared.migrations.ports``.
Otherwise the package would import the ports and the ports its types, a circle between the two folders (the
``ports-speak-base-types`` import contract keeps it out).
The thread, run and stream ports are re-exported here, so ``from shared.ports import EventStream`` works.
"""

from shared.ports.audit import AuditLog
from shared.ports.runs import RunLedger, RunPosition
from shared.ports.streams import BatchEventStream, EventStream, ProbedStream, RetainedStream, StreamEntry
from shared.ports.threads import ConversationStore, MessageHistoryReader, ThreadStore

__all__ = [
    "AuditLog",
    "BatchEventStream",
    "ConversationStore",
    "EventStream",
    "MessageHistoryReader",
    "ProbedStream",
    "RetainedStream",
    "RunLedger",
    "RunPosition",
    "StreamEntry",
    "ThreadStore",
]
