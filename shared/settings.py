"""The settings, in groups, read from the environment with pydantic-settings. Environment variable names appear
only here (each field's name in capitals, unless its field says otherwise) and in template.yaml (and the local
runner, which sets defaults).

Each group is what one part of the process reads (the table, the stream, the model...). :class:`Settings` is every
group: what the composition root is built from. Each function reads only its own groups from the environment
(``shared.wiring.settings``: its typed model, with the JSON settings parsed at load), the others keep their defaults.
"""

from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeVar

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator
from pydantic_settings import EnvSettingsSource, NoDecode
from pydantic_settings.sources.utils import parse_env_vars

from shared.errors import ConfigurationError

LOCAL_JWT_SECRET = "local-development-secret-not-for-production"


class SettingsGroup(BaseModel):
    """A group of settings: given by field name in code, read by environment variable name from the environment.

    ``defer_build``: a model's validator is built when it first validates, not when its class is defined, so a
    function builds only its own model and :class:`Settings`, not the other functions' (callgrind: the API's import
    and settings load fall from 2,588 to 2,557 M instructions, docs/benchmarks.md §4)."""

    model_config = ConfigDict(populate_by_name=True, str_strip_whitespace=True, defer_build=True)


class TableSettings(SettingsGroup):
    """The main DynamoDB table and how long its records live."""

    table_name: str = "agent-backend"
    aws_region: str = Field(
        default="us-east-1", validation_alias=AliasChoices("aws_region", "AWS_REGION", "AWS_DEFAULT_REGION")
    )
    dynamodb_endpoint_url: str | None = None
    # DynamoDB TTL (``expires_at``) of run and audit records; threads, messages and memories do not expire.
    run_retention_days: int = Field(default=90, ge=1)
    audit_retention_days: int = Field(default=400, ge=1)
    usage_retention_days: int = Field(default=400, ge=1)
    """DynamoDB TTL (``expires_at``) of a user's daily and monthly usage records."""
    migration_status_ttl_s: float = Field(default=300.0, ge=0)
    """How often a process reads which migrations the table has completed (``/healthz``, the memory reader)."""


class StreamSettings(SettingsGroup):
    """The event stream (Redis) and the event bus "run completed" goes to."""

    redis_url: str | None = None
    redis_cluster_mode: bool = False
    event_bus_name: str | None = None
    event_stream_ttl_s: int = Field(default=24 * 3600, ge=3600, le=7 * 24 * 3600)
    """``EVENT_STREAM_TTL_S``: every Redis key the app writes expires this long after its last write (run and
    thread streams, control signals); at most 7 days (template.yaml's ``EventStreamTtlSeconds``)."""
    event_coalesce_window_ms: int = Field(default=50, ge=0, le=1000)
    """``EVENT_COALESCE_WINDOW_MS``: text and argument deltas of one message arriving within this window are
    written as one event (0: every delta on its own); the first delta of each message goes out at once."""
    event_coalesce_max_chars: int = Field(default=2048, ge=1, le=65536)
    """``EVENT_COALESCE_MAX_CHARS``: the most characters one batched delta gathers (a delta is never split)."""


class ModelSettings(SettingsGroup):
    """The chat model's endpoint, key and provider ids."""

    llm_base_url: str | None = None
    llm_api_key: str | None = None
    llm_api_key_secret_name: str | None = None
    llm_provider: str | None = None
    llm_timeout_s: float = 60.0
    llm_max_retries: int = 2
    llm_image_urls: Literal["data", "presigned"] = "data"
    """``LLM_IMAGE_URLS``: how a stored image reaches the provider: ``data`` (a data URL of the bytes, which every
    local server takes) or ``presigned`` (a 15-minute presigned S3 GET URL the provider fetches)."""
    model_id_map: str | None = None
    """``MODEL_ID_MAP``: JSON ``{"<logical id>": "<provider id>"}`` (shared.llm.model_ids)."""


class CatalogSettings(SettingsGroup):
    """The profiles' roll-out and window override, runtime configuration, server tools and MCP servers."""

    window_n_override: int | None = None
    """``WINDOW_N_OVERRIDE``: checked once, by shared.rollouts.parse_window_override, when the settings load."""
    profile_rollout: str | None = None
    appconfig_application: str | None = None
    """With ``appconfig_environment`` and ``appconfig_profile``: the AppConfig configuration that adds profiles and
    replaces ``PROFILE_ROLLOUT`` / ``WINDOW_N_OVERRIDE`` while the functions run (shared.runtime_config), read
    through the AppConfig Lambda extension. All three unset: no runtime configuration."""
    appconfig_environment: str | None = None
    appconfig_profile: str | None = None
    appconfig_extension_url: str = "http://localhost:2772"
    """Where the AppConfig Lambda extension serves (its default port is 2772)."""
    runtime_config_poll_s: float = Field(default=15.0, gt=0)
    """How long a process uses the configuration it read before asking the extension again."""
    runtime_config_timeout_s: float = Field(default=1.0, gt=0)
    """How long one read from the extension may take before the last good configuration is kept instead."""
    tool_plugins: str | None = None
    """Comma-separated ``module:attribute`` paths of server tools to register (shared.tools.plugins)."""
    mcp_servers: str | None = None
    """JSON object naming the MCP tool servers profiles may use (shared.tools.mcp.parse_mcp_servers)."""


class RunSettings(SettingsGroup):
    """A run's lease, heartbeat and deadlines, and the limits it is admitted under."""

    sse_ping_interval_s: float = 15.0
    run_lease_s: float = Field(default=30.0, gt=0)
    """How long a thread stays with a run whose heartbeat stopped; a new message then takes the thread over."""
    run_heartbeat_s: float = Field(default=10.0, gt=0)
    """How often a run renews its lease (one DynamoDB write); below ``run_lease_s``."""
    function_timeout_s: float = Field(default=900.0, gt=0)
    """The invocation deadline when no Lambda context gives one (the streaming function's timeout)."""
    run_deadline_margin_s: float = Field(default=20.0, ge=0)
    """A run ends with ``run_deadline`` this long before its invocation's deadline."""
    stream_deadline_margin_s: float = Field(default=5.0, ge=0)
    """A stream response closes this long before its invocation's deadline (the client resumes)."""
    limits: str | None = None
    """``LIMITS``: JSON of the deployment's limits (shared.limits.config); unset: nothing counted or refused."""
    run_slice_s: float | None = Field(default=None, gt=0)
    """``RUN_SLICE_S``: the longest one invocation executes a run before it goes on in a new one, between two steps
    (``shared.runs.slices``); unset: until ``run_slice_reserve_s`` before the invocation's deadline."""
    run_slice_reserve_s: float = Field(default=180.0, ge=0)
    """A slice ends this long before its invocation's deadline (a model turn and its tools fit in it)."""
    background_run_function: str | None = None
    """``BACKGROUND_RUN_FUNCTION``: the function that runs background runs (``shared.runs.background``), invoked
    asynchronously. Unset: they run in this process (``make dev``), or, inside Lambda, are refused."""


class MemorySettings(SettingsGroup):
    """Memory extraction: its threshold, queue, quiet period, embedder and idempotency table."""

    memory_confidence_threshold: float = 0.7
    memory_queue_url: str | None = None
    """Where delayed "extraction due" messages go (the memory queue itself)."""
    memory_idle_s: int | None = Field(default=None, ge=0, le=900)
    """Overrides every memory profile's ``memory_policy.idle_s`` (``make dev`` shortens the quiet period)."""
    embeddings_model_id: str | None = None
    """An OpenAI-compatible embeddings model for memory duplicate detection; unset: the offline lexicon."""
    embeddings_base_url: str | None = None
    """Where that model is served (default: ``LLM_BASE_URL``, with the same key)."""
    memory_duplicate_similarity: float | None = Field(default=None, gt=0, le=1)
    """Cosine similarity from which two memories are the same fact (default: the embedder's own)."""
    idempotency_table_name: str = "agent-backend-idempotency"


class SchedulerSettings(SettingsGroup):
    """EventBridge Scheduler, for automation tasks' schedules."""

    scheduler_group_name: str | None = None
    scheduler_role_arn: str | None = None
    scheduler_dead_letter_arn: str | None = None
    automation_function_arn: str | None = None


class AuthSettings(SettingsGroup):
    """How the API verifies a caller's token."""

    auth_mode: Literal["hs256", "jwks"] = "hs256"
    jwt_secret: str | None = None
    jwt_issuer: str | None = None
    jwt_audience: str | None = None
    jwks_url: str | None = None
    jwt_user_claim: str = "sub"
    jwt_tenant_claim: str = "tenant_id"
    jwt_scope_claim: str = "scope"


class TenancySettings(SettingsGroup):
    """Which tenants this stack serves (shared.tenancy, docs/scaling.md §2)."""

    served_tenants: Annotated[tuple[str, ...], NoDecode] = ("*",)
    """``SERVED_TENANTS``: a comma list of tenant ids, or ``*`` (every tenant, the default). A token of another
    tenant is refused with ``404 tenant_not_served``; its automation fires and memory events are dropped."""

    @field_validator("served_tenants", mode="before")
    @classmethod
    def _tenant_list(cls, value: object) -> object:
        """``"a, b"`` -> ``("a", "b")``; ``*`` alone or not at all, and never an empty list (a stack serving no one
        is a typo, not a configuration)."""
        if isinstance(value, str):
            value = tuple(item.strip() for item in value.split(",") if item.strip())
        if isinstance(value, tuple | list):
            if not value:
                raise ValueError("list at least one tenant, or *")
            if "*" in value and len(value) > 1:
                raise ValueError("* serves every tenant: list no tenant beside it")
        return value


class HttpSettings(SettingsGroup):
    """The HTTP API: CORS, body size, the playground, the usage API's prices."""

    # Browser origins allowed to call the API (CORS); empty sends no CORS headers. "*" allows any origin.
    cors_allowed_origins: Annotated[tuple[str, ...], NoDecode] = ()
    max_body_bytes: int = 1024 * 1024
    playground_enabled: bool = False
    model_prices: str | None = None
    """``MODEL_PRICES``: JSON price table for the usage API's estimated cost (shared.limits.usage); unset: the dated
    table of bench/capacity_prices.py."""

    @field_validator("cors_allowed_origins", mode="before")
    @classmethod
    def _comma_list(cls, value: object) -> object:
        """``"a, b"`` -> ``("a", "b")``."""
        if isinstance(value, str):
            return tuple(item.strip() for item in value.split(",") if item.strip())
        return value


class AttachmentSettings(SettingsGroup):
    """The images and files of user messages: the bucket they are stored in and the bounds of an intake
    (shared.attachments.limits, docs/protocols/agent/errors.md)."""

    attachments_bucket: str | None = None
    """``ATTACHMENTS_BUCKET``: the stack's attachment bucket; unset: an in-memory store (tests, embedded use)."""
    s3_endpoint_url: str | None = None
    attachment_presigned_urls: bool = True
    """History gives presigned S3 GET URLs; False: the API's own parts route (``make dev``'s in-process S3)."""
    attachment_url_ttl_s: int = Field(default=900, ge=60, le=900)
    """How long a part's read URL works: at most 15 minutes."""
    attachment_max_part_bytes: int = Field(default=512 * 1024, ge=1)
    attachment_max_message_bytes: int = Field(default=720 * 1024, ge=1)
    attachment_max_upload_bytes: int = Field(default=10 * 1024 * 1024, ge=1, le=100 * 1024 * 1024)
    attachment_max_parts: int = Field(default=8, ge=1, le=32)
    attachment_max_image_pixels: int = Field(default=16_384 * 28 * 28, ge=1)
    attachment_max_pdf_pages: int = Field(default=50, ge=1)
    attachment_max_document_chars: int = Field(default=20_000, ge=1)


class MigrationSettings(SettingsGroup):
    """A migration run's parallelism, page size and write rate."""

    migration_segments: int = Field(default=4, ge=1, le=64)
    """Parallel scan segments (threads) of a migration's first run; its checkpoints are per segment."""
    migration_page_size: int = Field(default=200, ge=1, le=1000)
    """Items a migration's scan reads per page; a checkpoint is saved after each page."""
    migration_rate_wcu: float = Field(default=100.0, gt=0)
    """Write capacity units per second a migration run may spend (its writes and checkpoints together)."""


class TracingSettings(SettingsGroup):
    """Traces (shared/tracing, docs/observability.md "Traces"): off unless an OTLP endpoint is set. The SDK reads the
    other standard variables itself (headers, timeout, sampler)."""

    otel_exporter_otlp_endpoint: str | None = None
    otel_exporter_otlp_traces_endpoint: str | None = None
    otel_exporter_otlp_protocol: str | None = None
    otel_exporter_otlp_traces_protocol: str | None = None
    otel_service_name: str | None = None
    otel_instrumentation_genai_capture_message_content: bool = False


class ProcessSettings(SettingsGroup):
    """Where the process runs."""

    embedded: bool = False
    lambda_function_name: str | None = Field(
        default=None, validation_alias=AliasChoices("lambda_function_name", "AWS_LAMBDA_FUNCTION_NAME")
    )
    """Set by the Lambda runtime (``AWS_LAMBDA_FUNCTION_NAME``): the process is a Lambda execution environment, so
    a handler module builds its services while it is imported (the INIT phase), not on its first invocation."""


class WebhookSettings(ProcessSettings):
    """Signed webhooks when a run ends (shared.webhooks, docs/deployment.md "Webhooks")."""

    webhook_allow_loopback: bool = False
    """``WEBHOOK_ALLOW_LOOPBACK``: ``make dev`` only. Webhook targets on ``127.0.0.1``/``::1``/``localhost`` are
    accepted, over plain ``http`` too. Refused inside Lambda (and template.yaml never sets it: a test reads it)."""
    webhook_secret_prefix: str = "agent-backend/webhooks"
    """Secrets Manager name prefix of the tenants' signing secrets: ``<prefix>/<tenantId>``."""
    webhook_timeout_s: float = Field(default=5.0, gt=0, le=30)
    """How long a target has to answer one POST before the attempt counts as failed."""
    webhook_queue_url: str | None = None
    """The webhook queue, whose messages' visibility the webhook function stretches for backoff."""

    @field_validator("webhook_allow_loopback")
    @classmethod
    def _loopback_only_off_lambda(cls, value: bool, info: ValidationInfo) -> bool:
        # ``lambda_function_name`` (ProcessSettings) is validated first: a base class's fields come first.
        if value and info.data.get("lambda_function_name"):
            raise ValueError("WEBHOOK_ALLOW_LOOPBACK is for make dev only and cannot be set on a deployed function")
        return value


class Settings(
    WebhookSettings,
    TableSettings,
    StreamSettings,
    ModelSettings,
    CatalogSettings,
    RunSettings,
    MemorySettings,
    SchedulerSettings,
    AuthSettings,
    TenancySettings,
    HttpSettings,
    AttachmentSettings,
    MigrationSettings,
    TracingSettings,
    ProcessSettings,
):
    """Every group: what the composition root is built from (a process that runs every function, the local
    runner, reads them all)."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "Settings":
        """Every setting, read from ``env`` (default: the process environment)."""
        return read_settings(cls, env)


G = TypeVar("G", bound=SettingsGroup)


class _EnvironmentSource(EnvSettingsSource):
    """pydantic-settings' environment source over a given mapping (the process environment by default): names
    matched without regard to case, blank values taken as unset."""

    def __init__(self, model: type[BaseModel], env: Mapping[str, str] | None) -> None:
        self._given = env
        super().__init__(model, case_sensitive=False, env_ignore_empty=True)  # type: ignore[arg-type]

    def _load_env_vars(self) -> Mapping[str, str | None]:
        loaded = super()._load_env_vars() if self._given is None else parse_env_vars(self._given, False, True, None)
        # A value of only blanks is unset too, and a value is read without its surrounding blanks.
        return {name: value.strip() for name, value in loaded.items() if value is not None and value.strip()}


def read_settings(model: type[G], env: Mapping[str, str] | None = None) -> G:
    """``model``'s settings from ``env`` (default: the process environment), and only those.

    Raises:
        ConfigurationError: one, naming every variable whose value is wrong and why.
    """
    values: dict[str, Any] = _EnvironmentSource(model, env)()
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        raise ConfigurationError(invalid_settings_message(model, exc), code="invalid_setting") from None


def invalid_settings_message(model: type[BaseModel], exc: ValidationError) -> str:
    """``NAME: what is wrong`` for each wrong value, the variable named as the environment spells it."""
    problems = []
    for error in exc.errors():
        field = str(error["loc"][0]) if error["loc"] else ""
        name = field if field.isupper() else field.upper()
        problems.append(f"{name}: {error['msg']} (got {error.get('input')!r})")
    return "invalid settings: " + "; ".join(problems)
