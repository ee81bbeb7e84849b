"""One settings model, read once from the environment. Environment variable names appear only here and in
template.yaml (and the local runner, which sets defaults)."""

import os
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, Field

LOCAL_JWT_SECRET = "local-development-secret-not-for-production"


class Settings(BaseModel):
    table_name: str = "agent-backend"
    idempotency_table_name: str = "agent-backend-idempotency"
    aws_region: str = "us-east-1"
    dynamodb_endpoint_url: str | None = None

    redis_url: str | None = None
    redis_cluster_mode: bool = False

    llm_base_url: str | None = None
    llm_api_key: str | None = None
    llm_api_key_secret_name: str | None = None
    llm_provider: str | None = None
    llm_timeout_s: float = 60.0
    llm_max_retries: int = 2
    model_id_map: str | None = None
    """``MODEL_ID_MAP``: JSON ``{"<logical id>": "<provider id>"}`` (shared.llm.model_ids)."""

    window_n_override: int | None = Field(default=None, ge=1)
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

    event_bus_name: str | None = None
    scheduler_group_name: str | None = None
    scheduler_role_arn: str | None = None
    scheduler_dead_letter_arn: str | None = None
    automation_function_arn: str | None = None

    # Browser origins allowed to call the API (CORS); empty sends no CORS headers. "*" allows any origin.
    cors_allowed_origins: tuple[str, ...] = ()
    # DynamoDB TTL (``expires_at``) of run and audit records; threads, messages and memories do not expire.
    run_retention_days: int = Field(default=90, ge=1)
    audit_retention_days: int = Field(default=400, ge=1)

    auth_mode: Literal["hs256", "jwks"] = "hs256"
    jwt_secret: str | None = None
    jwt_issuer: str | None = None
    jwt_audience: str | None = None
    jwks_url: str | None = None
    jwt_user_claim: str = "sub"
    jwt_tenant_claim: str = "tenant_id"
    jwt_scope_claim: str = "scope"

    limits: str | None = None
    """``LIMITS``: JSON of the deployment's limits (shared.limits.config); unset: nothing counted or refused."""
    model_prices: str | None = None
    """``MODEL_PRICES``: JSON price table for the usage API's estimated cost (shared.limits.usage); unset: the dated
    table of bench/capacity_prices.py."""
    usage_retention_days: int = Field(default=400, ge=1)
    """DynamoDB TTL (``expires_at``) of a user's daily and monthly usage records."""

    max_body_bytes: int = 1024 * 1024
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
    migration_status_ttl_s: float = Field(default=300.0, ge=0)
    """How often a process reads which migrations the table has completed (``/healthz``, the memory reader)."""
    migration_segments: int = Field(default=4, ge=1, le=64)
    """Parallel scan segments (threads) of a migration's first run; its checkpoints are per segment."""
    migration_page_size: int = Field(default=200, ge=1, le=1000)
    """Items a migration's scan reads per page; a checkpoint is saved after each page."""
    migration_rate_wcu: float = Field(default=100.0, gt=0)
    """Write capacity units per second a migration run may spend (its writes and checkpoints together)."""
    embedded: bool = False
    playground_enabled: bool = False
    lambda_function_name: str | None = None
    """Set by the Lambda runtime (``AWS_LAMBDA_FUNCTION_NAME``): the process is a Lambda execution environment, so
    a handler module builds its services while it is imported (the INIT phase), not on its first invocation."""
    # Traces (shared/tracing, docs/observability.md "Traces"): off unless an OTLP endpoint is set. The SDK reads the
    # other standard variables itself (headers, timeout, sampler).
    otel_exporter_otlp_endpoint: str | None = None
    otel_exporter_otlp_traces_endpoint: str | None = None
    otel_exporter_otlp_protocol: str | None = None
    otel_exporter_otlp_traces_protocol: str | None = None
    otel_service_name: str | None = None
    otel_instrumentation_genai_capture_message_content: bool = False

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "Settings":
        e = os.environ if env is None else env

        def opt(name: str) -> str | None:
            value = e.get(name, "").strip()
            return value or None

        values: dict[str, object] = {
            "table_name": opt("TABLE_NAME"),
            "idempotency_table_name": opt("IDEMPOTENCY_TABLE_NAME"),
            "aws_region": opt("AWS_REGION") or opt("AWS_DEFAULT_REGION"),
            "dynamodb_endpoint_url": opt("DYNAMODB_ENDPOINT_URL"),
            "redis_url": opt("REDIS_URL"),
            "redis_cluster_mode": (opt("REDIS_CLUSTER_MODE") or "false").lower() == "true",
            "llm_base_url": opt("LLM_BASE_URL"),
            "llm_api_key": opt("LLM_API_KEY"),
            "llm_api_key_secret_name": opt("LLM_API_KEY_SECRET_NAME"),
            "llm_provider": opt("LLM_PROVIDER"),
            "llm_timeout_s": opt("LLM_TIMEOUT_S"),
            "llm_max_retries": opt("LLM_MAX_RETRIES"),
            "model_id_map": opt("MODEL_ID_MAP"),
            "window_n_override": opt("WINDOW_N_OVERRIDE"),
            "memory_confidence_threshold": opt("MEMORY_CONFIDENCE_THRESHOLD"),
            "memory_queue_url": opt("MEMORY_QUEUE_URL"),
            "memory_idle_s": opt("MEMORY_IDLE_S"),
            "embeddings_model_id": opt("EMBEDDINGS_MODEL_ID"),
            "embeddings_base_url": opt("EMBEDDINGS_BASE_URL"),
            "memory_duplicate_similarity": opt("MEMORY_DUPLICATE_SIMILARITY"),
            "profile_rollout": opt("PROFILE_ROLLOUT"),
            "tool_plugins": opt("TOOL_PLUGINS"),
            "mcp_servers": opt("MCP_SERVERS"),
            "event_bus_name": opt("EVENT_BUS_NAME"),
            "scheduler_group_name": opt("SCHEDULER_GROUP_NAME"),
            "scheduler_role_arn": opt("SCHEDULER_ROLE_ARN"),
            "scheduler_dead_letter_arn": opt("SCHEDULER_DEAD_LETTER_ARN"),
            "cors_allowed_origins": _comma_list(opt("CORS_ALLOWED_ORIGINS")),
            "run_retention_days": opt("RUN_RETENTION_DAYS"),
            "audit_retention_days": opt("AUDIT_RETENTION_DAYS"),
            "automation_function_arn": opt("AUTOMATION_FUNCTION_ARN"),
            "auth_mode": opt("AUTH_MODE"),
            "jwt_secret": opt("JWT_SECRET"),
            "jwt_issuer": opt("JWT_ISSUER"),
            "jwt_audience": opt("JWT_AUDIENCE"),
            "jwks_url": opt("JWKS_URL"),
            "jwt_user_claim": opt("JWT_USER_CLAIM"),
            "jwt_tenant_claim": opt("JWT_TENANT_CLAIM"),
            "jwt_scope_claim": opt("JWT_SCOPE_CLAIM"),
            "max_body_bytes": opt("MAX_BODY_BYTES"),
            "sse_ping_interval_s": opt("SSE_PING_INTERVAL_S"),
            "run_lease_s": opt("RUN_LEASE_S"),
            "run_heartbeat_s": opt("RUN_HEARTBEAT_S"),
            "function_timeout_s": opt("FUNCTION_TIMEOUT_S"),
            "run_deadline_margin_s": opt("RUN_DEADLINE_MARGIN_S"),
            "stream_deadline_margin_s": opt("STREAM_DEADLINE_MARGIN_S"),
            **{name: opt(name.upper()) for name in _NAMED_AS_FIELDS},
            "embedded": (opt("EMBEDDED") or "false").lower() == "true",
            "playground_enabled": (opt("PLAYGROUND_ENABLED") or "false").lower() == "true",
            "lambda_function_name": opt("AWS_LAMBDA_FUNCTION_NAME"),
        }
        return cls.model_validate({k: v for k, v in values.items() if v is not None})


_NAMED_AS_FIELDS = (
    "appconfig_application",
    "appconfig_environment",
    "appconfig_profile",
    "appconfig_extension_url",
    "runtime_config_poll_s",
    "runtime_config_timeout_s",
    "migration_status_ttl_s",
    "migration_segments",
    "migration_page_size",
    "migration_rate_wcu",
    "limits",
    "model_prices",
    "usage_retention_days",
    "otel_exporter_otlp_endpoint",
    "otel_exporter_otlp_traces_endpoint",
    "otel_exporter_otlp_protocol",
    "otel_exporter_otlp_traces_protocol",
    "otel_service_name",
    "otel_instrumentation_genai_capture_message_content",
)
"""Fields read from the environment variable of the same name in capitals (``MIGRATION_RATE_WCU``...)."""


def _comma_list(value: str | None) -> tuple[str, ...] | None:
    """``"a, b"`` -> ``("a", "b")``; None when unset."""
    if value is None:
        return None
    return tuple(item.strip() for item in value.split(",") if item.strip())
