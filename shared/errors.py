"""The one error root of the backend and its small tree.

    AgentError                      every error this package raises on purpose; carries a stable ``code``
    ├── InvalidRequest (400/422)    the caller sent something we cannot accept
    ├── Unauthenticated (401)       no token, or a token we do not trust
    ├── Forbidden (403)             a valid token without the scope the endpoint needs
    ├── NotFound (404)              absent, or belonging to someone else (never say which)
    ├── Conflict (409)              run id reused with another body, thread busy, concurrent writer
    ├── PayloadTooLarge (413)
    ├── TooManyRequests (429)       over a limit (quota_exceeded, too_many_runs); says when to retry
    ├── ServiceUnavailable (503)    a dependency (scheduler, stream store) is down; retry later
    │   └── RuntimeConfigUnavailable    the runtime configuration cannot be read (the last good one stays in use)
    ├── ModelError                  the model failed after retries; ends a run with RUN_ERROR
    └── ConfigurationError          a developer mistake found at start-up (bad profile, missing setting)

The HTTP layer maps these to status codes by type in one table (``functions.agent_api.errors``), never by
message text.
"""

from __future__ import annotations

from typing import Any


class AgentError(Exception):
    code = "internal_error"

    def __init__(self, message: str, *, code: str | None = None, details: Any = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.details = details


class InvalidRequest(AgentError):
    code = "invalid_request"


class Unauthenticated(AgentError):
    code = "unauthenticated"


class Forbidden(AgentError):
    code = "forbidden"


class NotFound(AgentError):
    code = "not_found"


class Conflict(AgentError):
    code = "conflict"


class PayloadTooLarge(AgentError):
    code = "payload_too_large"


class TooManyRequests(AgentError):
    """Over a limit (``shared.limits``): nothing was stored; ``retry_after_s`` is when trying again can succeed
    (the ``Retry-After`` header)."""

    code = "quota_exceeded"

    def __init__(self, message: str, *, code: str, details: Any, retry_after_s: int) -> None:
        super().__init__(message, code=code, details=details)
        self.retry_after_s = retry_after_s


class ServiceUnavailable(AgentError):
    code = "service_unavailable"


class RuntimeConfigUnavailable(ServiceUnavailable):
    """The runtime configuration (AppConfig, through its Lambda extension) could not be read. Never reaches a caller:
    the profiles keep the last good configuration (``shared.runtime_config``)."""

    code = "runtime_config_unavailable"


TRANSIENT_MODEL_CODES: frozenset[str] = frozenset(
    {"model_rate_limited", "model_unavailable", "model_timeout", "model_stream_interrupted"}
)
"""Model failures that may pass by themselves: the same request can succeed later (retry the run, not the text)."""


class ModelError(AgentError):
    code = "model_error"

    @property
    def transient(self) -> bool:
        """True when sending the same request again later may succeed (see ``TRANSIENT_MODEL_CODES``)."""
        return self.code in TRANSIENT_MODEL_CODES


class ConfigurationError(AgentError):
    code = "configuration_error"
