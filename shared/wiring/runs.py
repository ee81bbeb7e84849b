"""The run path: the run service, each run's worker, limits and usage, chat and threads, token verification."""

from __future__ import annotations

import dataclasses
from functools import cached_property
from typing import TYPE_CHECKING

from shared.executors.worker import WorkerExecutor
from shared.runs.service import RunService
from shared.tracing.api import tracer
from shared.wiring.catalog import CatalogProviders
from shared.wiring.models import ModelProviders
from shared.wiring.overrides import overridable
from shared.wiring.stores import StoreProviders
from shared.wiring.streams import StreamProviders

if TYPE_CHECKING:
    from shared.auth import TokenVerifier
    from shared.chat import ChatService
    from shared.executors.context import RunContext
    from shared.limits.gate import LimitGate
    from shared.limits.usage import UsageReports
    from shared.memory.trigger import RunCompletedPublisher
    from shared.models import Run, RunStatus
    from shared.ports.run_queue import QueueStarter
    from shared.run_events.coalescing import Coalescing
    from shared.run_results import ExecutionResult
    from shared.runs.slices import SlicePolicy
    from shared.runs.status import RunStatuses
    from shared.threads import ThreadService


class RunProviders(StoreProviders, StreamProviders, ModelProviders, CatalogProviders):
    """What a run needs, from admission to its "run completed" event."""

    def use_run_completed_publisher(self, publisher: RunCompletedPublisher) -> None:
        """Install the run-completed publisher of a process whose consumer needs these services itself (the local
        runner's in-process memory worker); before the run and thread services are built, so they see this one."""
        if any(name in vars(self) for name in ("runs", "threads", "run_completed_publisher")):
            raise RuntimeError("the run-completed publisher is already in use; install it before the first run")
        self.overrides = dataclasses.replace(self.overrides, run_completed_publisher=publisher)

    @cached_property
    def verifier(self) -> TokenVerifier:
        from shared.auth import TokenVerifier

        return TokenVerifier(self.settings, served=self.served_tenants)

    @cached_property
    def run_statuses(self) -> RunStatuses:
        from shared.runs.status import RunStatuses

        return RunStatuses(self.thread_store, self.run_ledger)

    @cached_property
    def runs(self) -> RunService:
        stream = self.stream
        if tracer().enabled:  # its calls as spans; with traces off nothing is imported or wrapped
            from shared.tracing.store_spans import traced_stream

            stream = traced_stream(stream)
        return RunService(
            self.thread_store,
            self.run_ledger,
            self.audit_log,
            stream,
            ping_interval_s=self.settings.sse_ping_interval_s,
            heartbeat_s=self.settings.run_heartbeat_s,
            lease_s=self.settings.run_lease_s,
            function_timeout_s=self.settings.function_timeout_s,
            run_deadline_margin_s=self.settings.run_deadline_margin_s,
            tail_deadline_margin_s=self.settings.stream_deadline_margin_s,
            on_run_finished=self._on_run_finished,
            limits=self.limits,
            coalescing=self._coalescing(),
            slices=self._slices(),
        )

    def _coalescing(self) -> Coalescing | None:
        """How a run's deltas are batched (``EVENT_COALESCE_WINDOW_MS``; 0: not at all)."""
        from shared.run_events.coalescing import Coalescing

        window_ms = self.settings.event_coalesce_window_ms
        if window_ms <= 0:
            return None
        return Coalescing(window_s=window_ms / 1000, max_chars=self.settings.event_coalesce_max_chars)

    @cached_property
    def limits(self) -> LimitGate | None:
        """The limits (``LIMITS``, parsed when the settings loaded); None when ``LIMITS`` is unset: nothing is
        counted and nothing refused."""
        config = self.structured.limits
        if config is None:
            return None
        from shared.limits.gate import LimitGate

        return LimitGate(self.usage_counters, config)

    @cached_property
    def usage_reports(self) -> UsageReports:
        """The usage API's views (a caller's day and month, a tenant's month) and the per-user limits' changes."""
        from shared.limits.usage import UsageReports

        return UsageReports(self.limits, self.usage_counters, self.structured.prices)

    @cached_property
    def chat(self) -> ChatService:
        """Starts chat runs (each run gets a worker executor of its own from ``worker``)."""
        from shared.chat import ChatService

        return ChatService(
            self.profiles,
            self.runs,
            self.worker,
            threads=self.thread_store,
            ledger=self.run_ledger,
            audit=self.audit_log,
            lease_s=self.settings.run_lease_s,
            queue=self.run_queue,
            attachments=self.attachments,
            attachment_limits=self.attachment_limits,
            allow_loopback_webhooks=self.settings.webhook_allow_loopback,
            starter=self.queue_starter,
            on_queued_run_ended=self._queued_run_ended,
        )

    async def _queued_run_ended(self, run: Run) -> None:
        """A queued run that ended without running: the run-ended event any run's end publishes (its webhook)."""
        publisher = self.run_completed_publisher
        if publisher is not None:
            await publisher.run_ended(run)

    @overridable("queue_starter")
    def queue_starter(self) -> QueueStarter | None:
        """What starts background runs: an asynchronous invocation of ``BACKGROUND_RUN_FUNCTION``; without one, a
        task of this process (``make dev``), or none at all inside Lambda (its environment freezes after the
        response, so nothing may run there after it)."""
        function = self.settings.background_run_function
        if function:
            from shared.adapters.aws.clients import client_factory
            from shared.adapters.aws.function_invoker import LambdaInvoker
            from shared.adapters.aws.queue_starter import LambdaQueueStarter

            invoker = LambdaInvoker(client_factory("lambda", region=self.settings.aws_region))
            return LambdaQueueStarter(invoker, function)
        if self.settings.lambda_function_name:
            return None
        from shared.runs.background import InProcessQueueStarter

        return InProcessQueueStarter(
            self._drain_here,
            lambda ticket: self.chat.continue_slice(ticket),
        )

    async def _drain_here(self, tenant_id: str, thread_id: str) -> bool:
        return (await self.chat.drain_queue(tenant_id, thread_id)).done

    def _slices(self) -> SlicePolicy | None:
        """Where a run that reaches its slice's end goes on (the run starter); None without one: a run ends at its
        invocation's deadline, as before slices."""
        starter = self.queue_starter
        if starter is None:
            return None
        from shared.runs.slices import SlicePolicy

        settings = self.settings
        return SlicePolicy(starter.continue_run, slice_s=settings.run_slice_s, reserve_s=settings.run_slice_reserve_s)

    @cached_property
    def threads(self) -> ThreadService:
        """What a caller may read of a thread: history, list, audit view, live events."""
        from shared.threads import ThreadService

        publisher = self.run_completed_publisher
        return ThreadService(
            self.thread_store,
            self.run_ledger,
            self.audit_log,
            self.runs,
            self.thread_states,
            on_branch_switched=publisher.branch_switched if publisher is not None else None,
            attachments=self.attachments,
            part_url_ttl_s=self.settings.attachment_url_ttl_s,
        )

    async def _on_run_finished(self, ctx: RunContext, status: RunStatus, result: ExecutionResult) -> None:
        """After every run, before its terminal event: its metrics; after a worker run, the "run completed" event
        for memory extraction (one call: the publisher decides what to publish)."""
        from shared.observability import emit_run_metrics

        await emit_run_metrics(ctx, status, result)
        if self.run_completed_publisher is not None:
            await self.run_completed_publisher.hook()(ctx, status, result)

    def worker(self) -> WorkerExecutor:
        from shared.memory.injection import ActiveMemories

        return WorkerExecutor(
            self.model,
            self.thread_store,
            self.audit_log,
            self.tools,
            memories=ActiveMemories(self.memories),
            mcp=self.mcp,
            states=self.thread_states,
            attachments=lambda: self.attachments,
            presigned_images=self.settings.llm_image_urls == "presigned",
        )
