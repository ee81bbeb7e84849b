"""What a test (or the local runner) hands the composition root instead of building it, and the one check of it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Protocol, TypeVar

from shared.ports import AuditLog, EventStream, RunLedger, ThreadStore
from shared.ports.model import ChatModel
from shared.profiles import Profiles
from shared.tools.registry import ToolRegistry

if TYPE_CHECKING:
    from shared.automation.ports import AutomationStore, TaskScheduler
    from shared.limits.ports import UsageCounters
    from shared.memory.ports import DueQueue, Embedder, MemoryStore, PendingExtractions
    from shared.memory.trigger import RunCompletedPublisher
    from shared.migrations.ports import FunctionInvoker, MigrationLog
    from shared.ports.attachments import AttachmentStore
    from shared.ports.config import ConfigSource
    from shared.ports.run_queue import QueueStarter
    from shared.ports.thread_state import ThreadStateStore
    from shared.tools.mcp_servers import McpToolbox
    from shared.webhooks.ports import WebhookPoster, WebhookSecrets


class MainTable(Protocol):
    """The main table's three aggregate adapters, built together: threads and messages, the run ledger, the audit
    log. They are built as one because they share what a process has one of (the DynamoDB client; the fakes'
    request meter), and the threads adapter writes run records in the admission's transaction through the ledger
    beside it. Each component is given only the ports it uses, taken from here by the composition root."""

    @property
    def threads(self) -> ThreadStore: ...

    @property
    def runs(self) -> RunLedger: ...

    @property
    def audit(self) -> AuditLog: ...


@dataclass(frozen=True, slots=True)
class ServiceOverrides:
    """Ports a test (or the local runner) supplies instead of the ones built from settings; None: build it.

    One field per injectable port, typed with the port, given by name (``ServiceOverrides(store=...)``): an
    unknown name is a type error for mypy and a ``TypeError`` when constructed. A copy with one port changed is
    ``dataclasses.replace(overrides, ...)``.
    """

    store: MainTable | None = None
    stream: EventStream | None = None
    model: ChatModel | None = None
    tools: ToolRegistry | None = None
    mcp: McpToolbox | None = None
    profiles: Profiles | None = None
    runtime_config: ConfigSource | None = None
    run_completed_publisher: RunCompletedPublisher | None = None
    memory_store: MemoryStore | None = None
    embedder: Embedder | None = None
    pending_extractions: PendingExtractions | None = None
    due_queue: DueQueue | None = None
    automation_store: AutomationStore | None = None
    automation_scheduler: TaskScheduler | None = None
    migration_log: MigrationLog | None = None
    function_invoker: FunctionInvoker | None = None
    usage_counters: UsageCounters | None = None
    thread_states: ThreadStateStore | None = None
    attachments: AttachmentStore | None = None
    webhook_secrets: WebhookSecrets | None = None
    webhook_poster: WebhookPoster | None = None
    queue_starter: QueueStarter | None = None


class Overridable(Protocol):
    """A group of providers: it knows the overrides it was given."""

    @property
    def overrides(self) -> ServiceOverrides: ...


P = TypeVar("P", bound=Overridable)
T = TypeVar("T")

_OVERRIDE_FIELDS = frozenset(field.name for field in dataclasses.fields(ServiceOverrides))


def overridable(field: str) -> Callable[[Callable[[P], T]], cached_property[T]]:
    """A provider that returns the override ``field`` when one was given, else builds its value with the decorated
    method; built once per services object either way (a ``cached_property``). ``field`` is checked when the
    provider is defined: a misspelt one fails the import, never falls back to real AWS silently."""
    if field not in _OVERRIDE_FIELDS:
        raise TypeError(f"ServiceOverrides has no field {field!r}")

    def decorate(build: Callable[[P], T]) -> cached_property[T]:
        def provide(self: P) -> T:
            given: T | None = getattr(self.overrides, field)
            return given if given is not None else build(self)

        provide.__name__, provide.__doc__ = build.__name__, build.__doc__
        return cached_property(provide)

    return decorate
