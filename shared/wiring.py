"""The composition root: the one module that assembles adapters and services from settings.

Everything is built lazily (nothing connects at import time) and once per :class:`Services` instance, as a typed
``cached_property``. Tests and the local runner replace a port through :class:`ServiceOverrides`, one typed field
per injectable port: a misspelt name is a type error (and a ``TypeError`` at run time), never a silent fallback
to real AWS. No domain module imports this one or an adapter (an import-linter contract in pyproject.toml).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Literal, cast

from shared.errors import ConfigurationError
from shared.executors.worker import WorkerExecutor
from shared.models import ExecutorKind
from shared.ports import EventStream
from shared.ports.model import ChatModel
from shared.ports.store import RunStore
from shared.profiles import MEMORY_TOOL_NAMES, PROFILES_DIR, ProfileChecks, Profiles, load_catalog
from shared.runs.service import Executor, RunService
from shared.settings import Settings
from shared.tools.clock import make_clock_tool
from shared.tools.plugins import parse_plugin_paths
from shared.tools.registry import ToolRegistry
from shared.tracing.setup import configure_tracing

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.idempotency import DynamoDBPersistenceLayer
    from mypy_boto3_dynamodb import DynamoDBClient

    from shared.adapters.aws.migration_runner import MigrationRunner, RunnerOptions
    from shared.auth import TokenVerifier
    from shared.automation.ports import AutomationStore, TaskScheduler
    from shared.automation.runner import AutomationRunner
    from shared.automation.service import AutomationService
    from shared.chat import ChatService
    from shared.erasure import Erasure
    from shared.executors.context import RunContext
    from shared.limits.gate import LimitGate
    from shared.limits.ports import UsageCounters
    from shared.limits.usage import UsageReports
    from shared.memory.coalescing import ExtractionCoalescer
    from shared.memory.job import MemoryExtraction
    from shared.memory.ports import DueQueue, Embedder, MemoryStore, PendingExtractions
    from shared.memory.trigger import RunCompletedPublisher
    from shared.migrations.ports import FunctionInvoker, MigrationLog
    from shared.migrations.status import PendingMigrations
    from shared.models import RunStatus
    from shared.ports.config import ConfigSource
    from shared.ports.run_queue import RunQueue
    from shared.ports.thread_state import ThreadStateStore
    from shared.run_results import ExecutionResult
    from shared.threads import ThreadService
    from shared.tools.mcp_servers import McpServerConfig, McpToolbox

logger = logging.getLogger(__name__)


LambdaFunction = Literal["api", "automation", "memory"]
"""Which function a process runs, for :meth:`Services.warm_up`."""

LOCAL_FUNCTION_ARN = "arn:aws:lambda:{region}:000000000000:function:automation-local"
LOCAL_ROLE_ARN = "arn:aws:iam::000000000000:role/scheduler-local"


AppStore = RunStore
"""The run and thread store as the HTTP layer uses it: the run service's (threads, runs and audit)."""


@dataclass(frozen=True, slots=True)
class ServiceOverrides:
    """Ports a test (or the local runner) supplies instead of the ones built from settings; None: build it.

    One field per injectable port, typed with the port, given by name (``ServiceOverrides(store=...)``): an
    unknown name is a type error for mypy and a ``TypeError`` when constructed. A copy with one port changed is
    ``dataclasses.replace(overrides, ...)``.
    """

    store: AppStore | None = None
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


class Services:
    """Every long-lived object one process needs. One per process (per Lambda container)."""

    def __init__(self, settings: Settings, overrides: ServiceOverrides | None = None) -> None:
        if overrides is not None and not isinstance(overrides, ServiceOverrides):
            raise TypeError(f"overrides must be a ServiceOverrides, not {type(overrides).__name__}")
        self.settings = settings
        self.overrides = overrides if overrides is not None else ServiceOverrides()

    def use_run_completed_publisher(self, publisher: RunCompletedPublisher) -> None:
        """Install the run-completed publisher of a process whose consumer needs these services itself (the local
        runner's in-process memory worker); before the run service is built, so its hook sees this one."""
        if "runs" in vars(self) or "run_completed_publisher" in vars(self):
            raise RuntimeError("the run-completed publisher is already in use; install it before the first run")
        self.overrides = dataclasses.replace(self.overrides, run_completed_publisher=publisher)

    @cached_property
    def dynamodb_client(self) -> DynamoDBClient:
        """The process's one DynamoDB client: every adapter of the main table, the migration runner and the memory
        function's idempotency records use it (built on first use, then shared)."""
        from shared.adapters.aws.clients import client_factory

        settings = self.settings
        make = client_factory("dynamodb", region=settings.aws_region, endpoint_url=settings.dynamodb_endpoint_url)
        client: DynamoDBClient = make()
        return client

    def _dynamodb(self) -> DynamoDBClient:
        """The factory every table adapter is given: it hands out :attr:`dynamodb_client`."""
        return self.dynamodb_client

    @cached_property
    def store(self) -> AppStore:
        """The main table's three aggregates (threads and messages, runs, audit), each its own adapter."""
        if self.overrides.store is not None:
            return self.overrides.store
        from shared.adapters.aws.dynamodb_store import DynamoDBStore
        from shared.adapters.aws.table_schema import Retention

        settings = self.settings
        return DynamoDBStore(
            settings.table_name,
            self._dynamodb,
            retention=Retention(
                run=timedelta(days=settings.run_retention_days), audit=timedelta(days=settings.audit_retention_days)
            ),
        )

    @cached_property
    def thread_states(self) -> ThreadStateStore:
        """Each thread's shared state: DynamoDB, on the store's table (an in-memory store gets the in-memory fake)."""
        if self.overrides.thread_states is not None:
            return self.overrides.thread_states
        from shared.adapters.aws.dynamodb_store import DynamoDBStore
        from shared.adapters.aws.thread_state import DynamoDBThreadStates

        store = self.store
        if isinstance(store, DynamoDBStore):
            threads = store.threads
            return DynamoDBThreadStates(threads.table_name, lambda: threads.client)
        from shared.adapters.in_memory.thread_state import InMemoryThreadStates

        return InMemoryThreadStates()

    @cached_property
    def stream(self) -> EventStream:
        if self.overrides.stream is not None:
            return self.overrides.stream
        from shared.adapters.redis_stream import RedisEventStream, connect

        if not self.settings.redis_url:
            raise RuntimeError("REDIS_URL is not set (the local runner provides an embedded stream store)")
        return RedisEventStream(connect(self.settings.redis_url, cluster=self.settings.redis_cluster_mode))

    @cached_property
    def model(self) -> ChatModel:
        if self.overrides.model is not None:
            return self.overrides.model
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
        if self.overrides.tools is not None:
            return self.overrides.tools
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
        if self.overrides.mcp is not None:
            return self.overrides.mcp
        if not self.settings.mcp_servers:
            return None
        from shared.tools.mcp_servers import McpToolbox, parse_mcp_servers

        return McpToolbox(parse_mcp_servers(self.settings.mcp_servers), header_value=_mcp_header_value)

    @cached_property
    def profiles(self) -> Profiles:
        """The packaged profiles with ``PROFILE_ROLLOUT`` and ``WINDOW_N_OVERRIDE``; with runtime configuration, the
        live profiles that build on them (shared.runtime_config; the packaged ones are the fallback)."""
        if self.overrides.profiles is not None:
            return self.overrides.profiles
        checks = self.profile_checks()
        settings = self.settings
        packaged = load_catalog(
            PROFILES_DIR,
            known_tools=checks.known_tools,
            rollout_json=settings.profile_rollout,
            window_n_override=settings.window_n_override,
            known_mcp_servers=checks.known_mcp_servers,
        )
        source = self.runtime_config
        if source is None:
            return packaged
        from shared.runtime_config import CatalogBase, LiveProfiles

        base = CatalogBase({p.name: p for p in packaged}, checks, settings.profile_rollout, settings.window_n_override)
        return LiveProfiles(source, base, fallback=packaged, poll_interval_s=settings.runtime_config_poll_s)

    def profile_checks(self) -> ProfileChecks:
        """What this deployment's profiles are checked against: its tools (built-in, plugins, MCP, memory) and MCP
        servers."""
        mcp = self.mcp
        return ProfileChecks(
            known_tools=self.tools.names | MEMORY_TOOL_NAMES | (mcp.known_tool_names() if mcp else frozenset()),
            known_mcp_servers=frozenset(mcp.server_names if mcp else ()),
        )

    @cached_property
    def runtime_config(self) -> ConfigSource | None:
        """The AppConfig configuration, read through its Lambda extension, when ``APPCONFIG_*`` name one."""
        if self.overrides.runtime_config is not None:
            return self.overrides.runtime_config
        settings = self.settings
        names = (settings.appconfig_application, settings.appconfig_environment, settings.appconfig_profile)
        if not any(names):
            return None
        application, environment, profile = names
        if not (application and environment and profile):
            raise ConfigurationError(
                "APPCONFIG_APPLICATION, APPCONFIG_ENVIRONMENT and APPCONFIG_PROFILE are set together or not at all",
                code="runtime_config_incomplete",
            )
        from shared.adapters.appconfig_extension import AppConfigExtensionSource

        return AppConfigExtensionSource(
            application,
            environment,
            profile,
            base_url=settings.appconfig_extension_url,
            timeout_s=settings.runtime_config_timeout_s,
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
            limits=self.limits,
        )

    @cached_property
    def usage_counters(self) -> UsageCounters:
        """The limits' counters and usage records: DynamoDB, on the main table."""
        if self.overrides.usage_counters is not None:
            return self.overrides.usage_counters
        from shared.adapters.aws.usage_counters import DynamoDBUsageCounters

        settings = self.settings
        return DynamoDBUsageCounters(
            settings.table_name,
            self._dynamodb,
            usage_retention=timedelta(days=settings.usage_retention_days),
        )

    @cached_property
    def limits(self) -> LimitGate | None:
        """The limits (``LIMITS``; a bad value is a ``ConfigurationError`` naming it); None when ``LIMITS`` is
        unset: nothing is counted and nothing refused."""
        if self.settings.limits is None:
            return None
        from shared.limits.config import parse_limits
        from shared.limits.gate import LimitGate

        return LimitGate(self.usage_counters, parse_limits(self.settings.limits))

    @cached_property
    def usage_reports(self) -> UsageReports:
        """The usage API's views (a caller's day and month, a tenant's month) and the per-user limits' changes."""
        from shared.limits.usage import UsageReports, parse_prices

        return UsageReports(self.limits, self.usage_counters, parse_prices(self.settings.model_prices))

    @cached_property
    def chat(self) -> ChatService:
        """Starts chat runs (each run gets a worker executor of its own from ``worker``)."""
        from shared.chat import ChatService

        return ChatService(
            self.profiles,
            self.runs,
            self.store,
            self.worker,
            threads=self.store,
            lease_s=self.settings.run_lease_s,
            queue=self.run_queue,
            queue_threads=self.store,
        )

    @cached_property
    def run_queue(self) -> RunQueue:
        """The runs waiting for a busy thread (``enqueue``): DynamoDB, on the store's table (an in-memory store gets
        the in-memory fake)."""
        from shared.adapters.aws.dynamodb_store import DynamoDBStore

        store = self.store
        if isinstance(store, DynamoDBStore):
            from shared.adapters.aws.run_queue import DynamoDBRunQueue

            threads = store.threads
            return DynamoDBRunQueue(threads.table_name, lambda: threads.client)
        from shared.adapters.in_memory.run_queue import InMemoryRunQueue

        return InMemoryRunQueue()

    @cached_property
    def threads(self) -> ThreadService:
        """What a caller may read of a thread: history, list, audit view, live events."""
        from shared.threads import ThreadService

        return ThreadService(self.store, self.runs, self.thread_states)

    async def _on_run_finished(self, ctx: RunContext, status: RunStatus, result: ExecutionResult) -> None:
        """After every run, before its terminal event: its metrics; after a worker run, the "run completed" event
        for memory extraction (one call: the publisher decides what to publish)."""
        from shared.observability import emit_run_metrics

        await emit_run_metrics(ctx, status, result)
        if self.run_completed_publisher is not None:
            await self.run_completed_publisher.hook()(ctx, status, result)

    @cached_property
    def memories(self) -> MemoryStore:
        """The memory store: DynamoDB, on the main table."""
        if self.overrides.memory_store is not None:
            return self.overrides.memory_store
        from shared.adapters.aws.memory_store import DynamoDBMemoryStore

        settings = self.settings
        return DynamoDBMemoryStore(
            settings.table_name,
            self._dynamodb,
            index_complete=self._memory_index_complete,
        )

    async def _memory_index_complete(self) -> bool:
        """Whether every active memory is in the index (migration 1 recorded as completed); not known: False, and
        the memory store reads the old shape too."""
        from shared.migrations.memory_index import ACTIVE_MEMORY_INDEX

        pending = self.pending_migrations
        return pending is not None and await pending.completed(ACTIVE_MEMORY_INDEX.id)

    @cached_property
    def migration_log(self) -> MigrationLog | None:
        """The table's record of completed migrations; None for a process given its own store and no log (tests
        on fakes): there is no table of the deployment's to read."""
        if self.overrides.migration_log is not None:
            return self.overrides.migration_log
        if self.overrides.store is not None:
            return None
        from shared.adapters.aws.migration_state import DynamoDBMigrationLog

        settings = self.settings
        return DynamoDBMigrationLog(
            settings.table_name,
            self._dynamodb,
        )

    @cached_property
    def pending_migrations(self) -> PendingMigrations | None:
        """Which migrations this code expects and the table has not completed, read at most every
        ``MIGRATION_STATUS_TTL_S`` (``/healthz``, the memory store's reader)."""
        log = self.migration_log
        if log is None:
            return None
        from shared.migrations.status import PendingMigrations

        return PendingMigrations(log, ttl_s=self.settings.migration_status_ttl_s)

    def migration_runner(self, options: RunnerOptions | None = None, *, owner: str | None = None) -> MigrationRunner:
        """A runner of the registry's migrations on the table, with ``options`` or the ``MIGRATION_*`` settings."""
        from shared.adapters.aws.migration_runner import MigrationRunner, RunnerOptions

        settings = self.settings
        defaults = RunnerOptions(
            segments=settings.migration_segments,
            page_size=settings.migration_page_size,
            rate_wcu=settings.migration_rate_wcu,
        )
        return MigrationRunner(settings.table_name, self.dynamodb_client, options or defaults, owner=owner)

    @cached_property
    def function_invoker(self) -> FunctionInvoker:
        """Asynchronous Lambda invocations (the migration function hands its remaining work to a new one)."""
        if self.overrides.function_invoker is not None:
            return self.overrides.function_invoker
        from shared.adapters.aws.clients import client_factory
        from shared.adapters.aws.function_invoker import LambdaInvoker

        return LambdaInvoker(client_factory("lambda", region=self.settings.aws_region))

    @cached_property
    def embedder(self) -> Embedder:
        """The OpenAI-compatible embeddings model when ``EMBEDDINGS_MODEL_ID`` is set; else the offline lexicon."""
        if self.overrides.embedder is not None:
            return self.overrides.embedder
        settings = self.settings
        base_url = settings.embeddings_base_url or settings.llm_base_url
        if not settings.embeddings_model_id or not base_url:
            from shared.memory.embeddings import LexiconEmbedder

            lexicon = LexiconEmbedder()
            if settings.memory_duplicate_similarity is not None:
                lexicon.duplicate_similarity = settings.memory_duplicate_similarity
            return lexicon
        from shared.adapters.openai_embeddings import DEFAULT_DUPLICATE_SIMILARITY, OpenAIEmbedder

        return OpenAIEmbedder(
            base_url,
            self.llm_api_key(),
            settings.embeddings_model_id,
            duplicate_similarity=settings.memory_duplicate_similarity or DEFAULT_DUPLICATE_SIMILARITY,
        )

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
            self.store,
            self.memories,
            self.store,
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
            store=self.store,
            memories=self.memories,
            model=self.model,
            profiles=self.profiles,
            confidence_threshold=self.settings.memory_confidence_threshold,
            tools=self.tools,
            embedder=self.embedder,
        )

    @cached_property
    def pending_extractions(self) -> PendingExtractions:
        """The per-thread pending-extraction markers: DynamoDB, on the main table."""
        if self.overrides.pending_extractions is not None:
            return self.overrides.pending_extractions
        from shared.adapters.aws.memory_pending import DynamoDBPendingExtractions

        settings = self.settings
        return DynamoDBPendingExtractions(
            settings.table_name,
            self._dynamodb,
        )

    @cached_property
    def idempotency_records(self) -> DynamoDBPersistenceLayer:
        """Where the memory function records the events it handled (Powertools idempotency, its own table),
        through the process's one DynamoDB client."""
        from aws_lambda_powertools.utilities.idempotency import DynamoDBPersistenceLayer

        return DynamoDBPersistenceLayer(
            table_name=self.settings.idempotency_table_name, boto3_client=self.dynamodb_client
        )

    @cached_property
    def due_queue(self) -> DueQueue:
        """Where delayed "extraction due" messages go: SQS at ``MEMORY_QUEUE_URL``."""
        if self.overrides.due_queue is not None:
            return self.overrides.due_queue
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

    @cached_property
    def automation_store(self) -> AutomationStore:
        """The automation tasks: DynamoDB, on the main table."""
        if self.overrides.automation_store is not None:
            return self.overrides.automation_store
        from shared.adapters.aws.automation_store import DynamoDBAutomationStore

        settings = self.settings
        return DynamoDBAutomationStore(
            settings.table_name,
            self._dynamodb,
        )

    @cached_property
    def task_scheduler(self) -> TaskScheduler:
        """EventBridge Scheduler with the configured group, target and role. The embedded local runner (moto) gets
        placeholder ARNs; anywhere else a missing setting is a start-up error."""
        if self.overrides.automation_scheduler is not None:
            return self.overrides.automation_scheduler
        from shared.adapters.aws.clients import client_factory
        from shared.adapters.aws.scheduler import EventBridgeTaskScheduler

        settings = self.settings
        target, role = settings.automation_function_arn, settings.scheduler_role_arn
        if settings.embedded:
            target = target or LOCAL_FUNCTION_ARN.format(region=settings.aws_region)
            role = role or LOCAL_ROLE_ARN
        if not target or not role:
            needed = (("AUTOMATION_FUNCTION_ARN", target), ("SCHEDULER_ROLE_ARN", role))
            missing = [name for name, value in needed if not value]
            raise ConfigurationError(
                f"automation tasks need {', '.join(missing)} (set by template.yaml)", code="scheduler_not_configured"
            )
        return EventBridgeTaskScheduler(
            client_factory("scheduler", region=settings.aws_region),
            group_name=settings.scheduler_group_name or "default",
            target_arn=target,
            role_arn=role,
            dead_letter_arn=settings.scheduler_dead_letter_arn,
        )

    @cached_property
    def erasure(self) -> Erasure:
        """Deletes a thread or all of a user's data (``DELETE /threads/{id}``, ``DELETE /me``); the automation
        service is built only when the user has tasks (it needs the Scheduler's settings)."""
        from shared.erasure import ErasableStreams, Erasure

        # Both stream adapters (Redis, in-memory) delete keys; the EventStream port leaves it out, for its fakes.
        return Erasure(
            self.store,
            cast(ErasableStreams, self.stream),
            self.pending_extractions,
            self.memories,
            self.automation_store,
            lambda: self.automation_service,
            states=self.thread_states,
        )

    @cached_property
    def automation_service(self) -> AutomationService:
        """Owner-scoped task CRUD, keeping each task and its schedule in step."""
        from shared.automation.service import AutomationService

        return AutomationService(
            self.automation_store, self.task_scheduler, self.store, self.profiles, self.tools.names
        )

    @cached_property
    def automation_runner(self) -> AutomationRunner:
        """Runs a fired task on the executor its profile names (a fresh executor per fire)."""
        from shared.automation.runner import AutomationRunner

        def executor_for(kind: ExecutorKind) -> Executor:
            return self.worker() if kind is ExecutorKind.WORKER else self.memory_executor()

        return AutomationRunner(
            self.automation_store,
            self.runs,
            self.store,
            self.store,
            self.profiles,
            executor_for,
            memory_leases=self.pending_extractions,
        )

    @cached_property
    def run_completed_publisher(self) -> RunCompletedPublisher | None:
        """Publishes "run completed" to EventBridge for memory extraction; None when no bus is configured."""
        if self.overrides.run_completed_publisher is not None:
            return self.overrides.run_completed_publisher
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

    def warm_up(self, function: LambdaFunction = "api") -> list[str]:
        """Build what an invocation of ``function`` would otherwise build first, while the function initialises:
        the store clients (DynamoDB), the stream client (Redis), the model adapter's HTTP client (imports
        ``openai``), the catalogs, the run service, the worker, the tokenizer and the metrics library; for the API
        the token verifier, for the automation function its runner, for the memory function the coalescer's parts.
        No network call; a part that cannot be built (a setting missing in a test) is skipped, logged, and built on
        first use as before. Returns the parts built."""
        built: list[str] = []
        for name, step in self._warm_steps(function).items():
            try:
                step()
            except Exception as exc:
                logger.info("warm-up skipped a part", extra={"part": name, "reason": type(exc).__name__})
                continue
            built.append(name)
        return built

    def _warm_steps(self, function: LambdaFunction) -> dict[str, Callable[[], object]]:
        import importlib

        common: dict[str, Callable[[], object]] = {
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
        own: dict[LambdaFunction, dict[str, Callable[[], object]]] = {
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
            },
        }
        return {**common, **own[function]}

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
            self.model,
            self.store,
            self.store,
            self.tools,
            memories=ActiveMemories(self.memories),
            mcp=self.mcp,
            states=self.thread_states,
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
