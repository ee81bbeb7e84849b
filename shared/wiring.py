"""Assembles adapters from settings, lazily: nothing connects at import time, and tests inject what they own."""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from shared.executors.worker import WorkerExecutor
from shared.llm.types import ChatModel
from shared.profiles import MEMORY_TOOL_NAMES, PROFILES_DIR, ProfileCatalog, load_catalog
from shared.runs.service import RunService
from shared.settings import Settings
from shared.tools.clock import make_clock_tool
from shared.tools.plugins import parse_plugin_paths
from shared.tools.registry import ToolRegistry

if TYPE_CHECKING:
    from shared.adapters.aws.dynamodb_store import DynamoDBStore
    from shared.adapters.redis_stream import RedisEventStream
    from shared.auth import TokenVerifier
    from shared.executors.context import RunContext
    from shared.memory.coalescing import DueQueue, ExtractionCoalescer
    from shared.memory.pending import PendingExtractions
    from shared.memory.store import MemoryStore
    from shared.memory.trigger import RunCompletedPublisher
    from shared.models import RunStatus
    from shared.run_results import ExecutionResult
    from shared.tools.mcp_servers import McpServerConfig, McpToolbox

logger = logging.getLogger(__name__)


@dataclass
class Services:
    """Every long-lived object one process needs. One per process (per Lambda container)."""

    settings: Settings
    overrides: dict[str, Any] = field(default_factory=dict)

    def _override(self, name: str) -> Any:
        return self.overrides.get(name)

    @cached_property
    def store(self) -> DynamoDBStore:
        if (store := self._override("store")) is not None:
            return store  # type: ignore[no-any-return]
        from datetime import timedelta

        from shared.adapters.aws.clients import client_factory
        from shared.adapters.aws.dynamodb_store import DynamoDBStore, Retention

        settings = self.settings
        return DynamoDBStore(
            settings.table_name,
            client_factory("dynamodb", region=settings.aws_region, endpoint_url=settings.dynamodb_endpoint_url),
            retention=Retention(
                run=timedelta(days=settings.run_retention_days), audit=timedelta(days=settings.audit_retention_days)
            ),
        )

    @cached_property
    def stream(self) -> RedisEventStream:
        if (stream := self._override("stream")) is not None:
            return stream  # type: ignore[no-any-return]
        from shared.adapters.redis_stream import RedisEventStream, connect

        if not self.settings.redis_url:
            raise RuntimeError("REDIS_URL is not set (the local runner provides an embedded stream store)")
        return RedisEventStream(connect(self.settings.redis_url, cluster=self.settings.redis_cluster_mode))

    @cached_property
    def model(self) -> ChatModel:
        if (model := self._override("model")) is not None:
            return model  # type: ignore[no-any-return]
        if self.settings.llm_base_url:
            from shared.llm.openai_chat import OpenAIChatModel
            from shared.llm.thinking import parse_provider

            return OpenAIChatModel(
                self.settings.llm_base_url,
                self._llm_api_key(),
                provider=parse_provider(self.settings.llm_provider) if self.settings.llm_provider else None,
                timeout_s=self.settings.llm_timeout_s,
                max_retries=self.settings.llm_max_retries,
                model_ids=self.model_ids,
            )
        from shared.llm.offline import OfflineChatModel

        logger.warning("no LLM_BASE_URL: using the built-in offline model")
        return OfflineChatModel()

    def llm_api_key(self) -> str:
        """The key for the model endpoint (and an embeddings endpoint on the same provider)."""
        return self._llm_api_key()

    @cached_property
    def model_ids(self) -> dict[str, str]:
        """``MODEL_ID_MAP``, validated; ids that the built-in model table does not know are logged, not refused."""
        from shared.llm.model_ids import parse_model_id_map
        from shared.profiles import KNOWN_MODELS

        mapping = parse_model_id_map(self.settings.model_id_map)
        for logical, provider_id in mapping.items():
            if provider_id not in KNOWN_MODELS:
                logger.warning(
                    "MODEL_ID_MAP names a provider model id the built-in table does not know; sending it as set",
                    extra={"model": logical, "provider_model": provider_id},
                )
        return mapping

    def _llm_api_key(self) -> str:
        """LLM_API_KEY if set; else the secret named by LLM_API_KEY_SECRET_NAME (Powertools Parameters, cached)."""
        if self.settings.llm_api_key:
            return self.settings.llm_api_key
        if self.settings.llm_api_key_secret_name:
            from aws_lambda_powertools.utilities import parameters

            value = parameters.get_secret(self.settings.llm_api_key_secret_name, max_age=300)
            return value if isinstance(value, str) else str(value)
        return "none"

    @cached_property
    def tools(self) -> ToolRegistry:
        """Built-in server tools plus the ``TOOL_PLUGINS`` ones; a duplicate or broken plugin fails the start."""
        if (tools := self._override("tools")) is not None:
            return tools  # type: ignore[no-any-return]
        registry = ToolRegistry()
        registry.register(make_clock_tool())
        paths = parse_plugin_paths(self.settings.tool_plugins)
        if paths:
            from shared.tools.plugins import register_plugins

            register_plugins(registry, paths)
        return registry

    @cached_property
    def mcp(self) -> McpToolbox | None:
        """The ``MCP_SERVERS`` of this deployment; None (and no ``mcp`` import) when there are none."""
        if (toolbox := self._override("mcp")) is not None:
            return toolbox  # type: ignore[no-any-return]
        if not self.settings.mcp_servers:
            return None
        from shared.tools.mcp_servers import McpToolbox, parse_mcp_servers

        return McpToolbox(parse_mcp_servers(self.settings.mcp_servers), header_value=_mcp_header_value)

    @cached_property
    def profiles(self) -> ProfileCatalog:
        if (catalog := self._override("profiles")) is not None:
            return catalog  # type: ignore[no-any-return]
        mcp = self.mcp
        return load_catalog(
            PROFILES_DIR,
            known_tools=self.tools.names | MEMORY_TOOL_NAMES | (mcp.known_tool_names() if mcp else frozenset()),
            rollout_json=self.settings.profile_rollout,
            window_n_override=self.settings.window_n_override,
            known_mcp_servers=mcp.server_names if mcp else (),
        )

    @cached_property
    def verifier(self) -> TokenVerifier:
        from shared.auth import TokenVerifier

        return TokenVerifier(self.settings)

    @cached_property
    def runs(self) -> RunService:
        return RunService(
            self.store,
            self.stream,
            ping_interval_s=self.settings.sse_ping_interval_s,
            heartbeat_s=self.settings.run_heartbeat_s,
            lease_s=self.settings.run_lease_s,
            function_timeout_s=self.settings.function_timeout_s,
            run_deadline_margin_s=self.settings.run_deadline_margin_s,
            tail_deadline_margin_s=self.settings.stream_deadline_margin_s,
            on_run_finished=self._on_run_finished,
        )

    async def _on_run_finished(self, ctx: RunContext, status: RunStatus, result: ExecutionResult) -> None:
        """After every run, before its terminal event: its metrics; after a worker run, the "run completed" event
        for memory extraction (one call: the publisher decides what to publish)."""
        from shared.observability import emit_run_metrics

        await emit_run_metrics(ctx, status, result)
        if self.run_completed_publisher is not None:
            await self.run_completed_publisher.hook()(ctx, status, result)

    @cached_property
    def memories(self) -> MemoryStore:
        from shared.memory.store import memory_store_for

        return memory_store_for(self)

    @cached_property
    def run_completed_publisher(self) -> RunCompletedPublisher | None:
        """Publishes "run completed" to EventBridge for memory extraction; None when no bus is configured."""
        if (publisher := self._override("run_completed_publisher")) is not None:
            return publisher  # type: ignore[no-any-return]
        if not self.settings.event_bus_name:
            return None
        from shared.adapters.aws.clients import client_factory
        from shared.adapters.aws.eventbridge import EventBridgePublisher
        from shared.memory.trigger import RunCompletedPublisher

        return RunCompletedPublisher(
            EventBridgePublisher(
                self.settings.event_bus_name, client_factory("events", region=self.settings.aws_region)
            )
        )

    def warm_up(self) -> list[str]:
        """Build what a request would otherwise build first, while the function initialises: the store clients
        (DynamoDB), the stream client (Redis), the model adapter's HTTP client (imports ``openai``), the token
        verifier, the catalogs, the run service, the worker, the tokenizer and the metrics library. No network call;
        a part that cannot be built (a setting missing in a test) is skipped, logged, and built on first use as
        before. Returns the parts built."""
        import importlib

        steps: dict[str, Any] = {
            "store": lambda: getattr(self.store, "client", None),
            "memories": lambda: getattr(self.memories, "client", None),
            "stream": lambda: self.stream,
            "model": self._warm_model,
            "verifier": lambda: self.verifier,
            "profiles": lambda: self.profiles,
            "runs": lambda: self.runs,
            "publisher": lambda: self.run_completed_publisher,
            "metrics": lambda: importlib.import_module("aws_lambda_powertools.metrics"),
            "tokenizer": lambda: importlib.import_module("shared.tokens").tokenizer_name(),
            # anyio loads its asyncio backend on the first sync dependency run in the thread pool (token checks).
            "anyio": lambda: importlib.import_module("anyio._backends._asyncio"),
            "worker": self.worker,
        }
        built: list[str] = []
        for name, step in steps.items():
            try:
                step()
            except Exception as exc:
                logger.info("warm-up skipped a part", extra={"part": name, "reason": type(exc).__name__})
                continue
            built.append(name)
        return built

    def _warm_model(self) -> None:
        """The model adapter's HTTP client, and the ``openai`` resources it loads lazily on the first request."""
        client = getattr(self.model, "client", None)
        if client is not None:
            _ = client.chat.completions

    async def connect(self) -> None:
        """Open connections during init, so the first request does not: the stream's (Redis, TLS on ElastiCache),
        the store's (one GetItem of a run that does not exist), and the worker threads the store's calls and the
        app's sync dependencies run on. Each part is tried on its own."""
        import anyio.to_thread

        async def store_connection() -> None:
            await self.store.get_run("warm-up", "warm-up")

        async def stream_connection() -> None:
            ping = getattr(self.stream, "ping", None)
            if ping is not None:
                await ping()

        parts = {
            "stream": stream_connection(),
            "store": store_connection(),
            "threads": asyncio.to_thread(lambda: None),
            "anyio threads": anyio.to_thread.run_sync(lambda: None),
        }
        results = await asyncio.gather(*parts.values(), return_exceptions=True)
        for name, outcome in zip(parts, results, strict=True):
            if isinstance(outcome, BaseException):
                logger.info("warm-up could not connect a part", extra={"part": name, "reason": type(outcome).__name__})

    def worker(self) -> WorkerExecutor:
        from shared.memory.injection import ActiveMemories

        return WorkerExecutor(
            self.model, self.store, self.store, self.tools, memories=ActiveMemories(self.memories), mcp=self.mcp
        )


def _mcp_header_value(config: McpServerConfig) -> str | None:
    """An MCP server's auth header value: from the environment variable it names, else from Secrets Manager."""
    if config.auth_env:
        return os.environ.get(config.auth_env) or None
    if config.auth_secret_name:
        from aws_lambda_powertools.utilities import parameters

        value = parameters.get_secret(config.auth_secret_name, max_age=300)
        return value if isinstance(value, str) else str(value)
    return None


# Memory extraction's coalescer (docs/memory.md) is composed here, so the domain module names no adapter.


def pending_extractions_for(services: Services) -> PendingExtractions:
    """The pending markers of a process: ``overrides["pending_extractions"]`` in tests, else DynamoDB."""
    override = services.overrides.get("pending_extractions")
    if override is not None:
        pending: PendingExtractions = override
        return pending
    from shared.adapters.aws.clients import client_factory
    from shared.adapters.aws.memory_pending import DynamoDBPendingExtractions

    settings = services.settings
    return DynamoDBPendingExtractions(
        settings.table_name,
        client_factory("dynamodb", region=settings.aws_region, endpoint_url=settings.dynamodb_endpoint_url),
    )


def coalescer_for(services: Services, queue: DueQueue | None = None) -> ExtractionCoalescer:
    """The coalescer of a process; ``queue`` (or ``overrides["due_queue"]``) else SQS at ``MEMORY_QUEUE_URL``."""
    settings = services.settings
    if queue is None:
        queue = services.overrides.get("due_queue")
    if queue is None:
        if not settings.memory_queue_url:
            from shared.errors import ConfigurationError

            raise ConfigurationError("MEMORY_QUEUE_URL is not set: delayed memory extraction has no queue")
        from shared.adapters.aws.clients import client_factory
        from shared.adapters.aws.sqs_due_queue import SqsDueQueue

        queue = SqsDueQueue(settings.memory_queue_url, client_factory("sqs", region=settings.aws_region))
    from shared.memory.coalescing import ExtractionCoalescer
    from shared.memory.job import MemoryExtraction

    return ExtractionCoalescer(
        MemoryExtraction.from_services(services),
        pending_extractions_for(services),
        queue,
        services.profiles,
        idle_s_override=settings.memory_idle_s,
    )
