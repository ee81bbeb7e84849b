"""Memory: the memory executor, one extraction on a thread, and the coalescer that schedules extractions."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

from shared.errors import ConfigurationError
from shared.runs.service import Executor
from shared.wiring.overrides import overridable
from shared.wiring.runs import RunProviders

if TYPE_CHECKING:
    from shared.memory.coalescing import ExtractionCoalescer
    from shared.memory.job import MemoryExtraction
    from shared.memory.ports import DueQueue
    from shared.titles.job import ThreadTitler


class MemoryProviders(RunProviders):
    """Memory extraction's parts, on the run path's."""

    def memory_executor(self) -> Executor:
        """A memory executor for one run (it keeps that run's result). A deployment without the memory package
        refuses a memory task clearly instead of running it on the wrong executor."""
        try:
            from shared.memory.executor import MemoryExecutor
        except ImportError as exc:
            raise ConfigurationError(
                "this task's profile runs the memory executor, but shared.memory.executor is not available",
                code="memory_executor_unavailable",
            ) from exc
        return MemoryExecutor(
            self.model,
            self.thread_store,
            self.memories,
            self.audit_log,
            confidence_threshold=self.settings.memory_confidence_threshold,
            tools=self.tools,
            embedder=self.embedder,
        )

    @cached_property
    def memory_extraction(self) -> MemoryExtraction:
        """One memory extraction on a thread, as the coalescer starts it (docs/memory.md)."""
        from shared.memory.job import MemoryExtraction

        return MemoryExtraction(
            runs=self.runs,
            threads=self.thread_store,
            audit=self.audit_log,
            memories=self.memories,
            model=self.model,
            profiles=self.profiles,
            confidence_threshold=self.settings.memory_confidence_threshold,
            tools=self.tools,
            embedder=self.embedder,
        )

    @cached_property
    def titler(self) -> ThreadTitler:
        """The title job the memory function runs on each run-completed event (docs/memory.md "Thread titles"):
        the memory profile's model, the thread stream for its ``thread_title`` event, the limits for its usage."""
        from shared.titles.job import ThreadTitler

        return ThreadTitler(
            threads=self.thread_store, model=self.model, profiles=self.profiles, stream=self.stream, limits=self.limits
        )

    @overridable("due_queue")
    def due_queue(self) -> DueQueue:
        """Where delayed "extraction due" messages go: SQS at ``MEMORY_QUEUE_URL``."""
        settings = self.settings
        if not settings.memory_queue_url:
            raise ConfigurationError("MEMORY_QUEUE_URL is not set: delayed memory extraction has no queue")
        from shared.adapters.aws.clients import client_factory
        from shared.adapters.aws.sqs_due_queue import SqsDueQueue

        return SqsDueQueue(settings.memory_queue_url, client_factory("sqs", region=settings.aws_region))

    def coalescer(self, queue: DueQueue | None = None) -> ExtractionCoalescer:
        """Memory extraction's coalescer; ``queue`` replaces :attr:`due_queue` (the local runner's timers)."""
        from shared.memory.coalescing import ExtractionCoalescer

        return ExtractionCoalescer(
            self.memory_extraction,
            self.pending_extractions,
            queue if queue is not None else self.due_queue,
            self.profiles,
            idle_s_override=self.settings.memory_idle_s,
        )
