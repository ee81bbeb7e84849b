"""Every long-lived object one process needs, in one object: the provider groups together, and what each function
builds ahead of its first invocation."""

from __future__ import annotations

import importlib

from shared.tracing.setup import configure_tracing
from shared.wiring.automation import AutomationProviders
from shared.wiring.migrations import MigrationProviders
from shared.wiring.warm_up import LambdaFunction, WarmStep, open_connections, warm_up
from shared.wiring.webhooks import WebhookProviders


class Services(AutomationProviders, MigrationProviders, WebhookProviders):
    """Every long-lived object one process needs. One per process (per Lambda container)."""

    def warm_up(self, function: LambdaFunction = "api") -> list[str]:
        """Build what an invocation of ``function`` would otherwise build first, while the function initialises:
        the store clients (DynamoDB), the stream client (Redis), the model adapter's HTTP client (imports
        ``openai``), the catalogs, the run service, the worker, the tokenizer and the metrics library; for the API
        the token verifier, for the automation function its runner, for the memory function the coalescer's parts.
        No network call; a part that cannot be built (a setting missing in a test) is skipped, logged, and built on
        first use as before. Returns the parts built."""
        return warm_up(self, function)

    async def connect(self) -> None:
        """Open connections during init, so the first request does not (:func:`open_connections`)."""
        await open_connections(self.run_ledger, self.stream)

    def warm_steps(self, function: LambdaFunction) -> dict[str, WarmStep]:
        """What an invocation of ``function`` would otherwise build first, by name, in order."""
        return {**self._common_warm_steps(), **self._own_warm_steps()[function]}

    def _common_warm_steps(self) -> dict[str, WarmStep]:
        return {
            # First: the spans of everything after it go to the exporter (off, importing nothing, without an endpoint).
            "tracing": lambda: configure_tracing(self.settings),
            "store": lambda: getattr(self.store, "client", None),
            "memories": lambda: getattr(self.memories, "client", None),
            # The memory read and /healthz ask which migrations the table completed (read later, built now).
            "pending migrations": lambda: self.pending_migrations and getattr(self.migration_log, "client", None),
            "stream": lambda: self.stream,
            "model": self._warm_model,
            # With runtime configuration, the first read of it (from the extension's cache, filled by its prefetch).
            "profiles": lambda: self.profiles.names,
            "runs": lambda: self.runs,
            "limits": lambda: self.limits and getattr(self.usage_counters, "client", None),
            "publisher": lambda: self.run_completed_publisher,
            "metrics": lambda: importlib.import_module("aws_lambda_powertools.metrics"),
            "tokenizer": lambda: importlib.import_module("shared.tokens").tokenizer_name(),
            "worker": self.worker,
        }

    def _own_warm_steps(self) -> dict[LambdaFunction, dict[str, WarmStep]]:
        return {
            "api": {
                "verifier": lambda: self.verifier,
                "chat": lambda: self.chat,
                "threads": lambda: self.threads,
                # anyio loads its asyncio backend on the first sync dependency run in the thread pool (token checks).
                "anyio": lambda: importlib.import_module("anyio._backends._asyncio"),
            },
            "automation": {
                "automation store": lambda: getattr(self.automation_store, "client", None),
                "automation runner": lambda: self.automation_runner,
                "memory executor": self.memory_executor,
            },
            "memory": {
                "pending extractions": lambda: getattr(self.pending_extractions, "client", None),
                "due queue": lambda: getattr(self.due_queue, "client", None),
                "coalescer": self.coalescer,
                "titler": lambda: self.titler,
                # Each record's tenant is checked against it before anything is read (shared.tenancy).
                "served tenants": lambda: self.served_tenants,
            },
        }

    def _warm_model(self) -> None:
        """The model adapter's HTTP client, and the ``openai`` resources it loads lazily on the first request."""
        client = getattr(self.model, "client", None)
        if client is not None:
            _ = client.chat.completions
