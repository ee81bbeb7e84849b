"""The ``openai`` SDK's errors as ``ModelError`` codes, which of them are tried again and after how long, and a
server's error text made fit for a log line. Used by the model adapter, ``shared.llm.openai_chat``; an SDK error
becomes ``ModelError`` with a stable code:

    model_rate_limited          HTTP 429, after the retries                                    transient
    model_unavailable           HTTP 5xx, connection refused or reset, after the retries;       transient
                                or 401/403 (the key was refused; not retried)
    model_timeout               no answer (or no next chunk) within ``timeout_s``               transient
    model_stream_interrupted    the stream broke or ended before a ``finish_reason``            transient
    model_rejected_request      the server rejected the request itself: any other 4xx, or a 5xx whose body is a
                                request-validation error (llama.cpp answers a schema error with 500). Never
                                retried: the same request fails the same way. ``details["rejected"]`` is
                                ``"history"`` when the server's explanation points at the messages.

Retrying is decided here (``retryable``, ``retry_delay``), done by the adapter, and only before the stream starts.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterable
from typing import Any

import openai

from shared.errors import ModelError

MAX_EXPLANATION_CHARS = 300
"""How much of a server's error text goes into a log line and an error message."""
RETRY_BASE_S = 0.5
RETRY_MAX_S = 8.0

# A 5xx whose body says the request failed validation: a server bug in the status code, not an outage.
_VALIDATION_BODY = re.compile(
    r"validation error|input should be|field required|extra inputs are not permitted|invalid_request_error"
    r"|is not of type|unprocessable|could not parse|bad request|invalid (?:value|type|message|request)",
    re.IGNORECASE,
)
_HISTORY_HINT = re.compile(r"messages|tool_call|\brole\b", re.IGNORECASE)
_SECRETS = (
    re.compile(r"(?i)((?:bearer|basic)\s+)[^\s\"',]+"),
    re.compile(r"(?i)((?:api[_-]?key|x-api-key|token|secret|password)[\"']?\s*[:=]\s*[\"']?)[^\s\"',}]+"),
    re.compile(r"\b(sk-)[A-Za-z0-9_-]{6,}"),
)


def explain_rejection(text: str, *, secrets: Iterable[str] = ()) -> str:
    """A server's error text made fit for a log line: one line, credentials removed, truncated."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "***")
    for pattern in _SECRETS:
        text = pattern.sub(lambda m: m.group(1) + "***", text)
    text = " ".join(text.split())
    if len(text) > MAX_EXPLANATION_CHARS:
        text = text[: MAX_EXPLANATION_CHARS - 1] + "…"
    return text


def retryable(exc: Exception, error: ModelError) -> bool:
    if isinstance(exc, openai.APIStatusError) and exc.status_code in (401, 403):
        return False  # the key was refused: asking again does not help
    return error.transient


def retry_delay(exc: Exception, attempt: int, base_s: float) -> float:
    """Exponential backoff with jitter, or what the server asked for in ``retry-after-ms`` / ``retry-after``."""
    if isinstance(exc, openai.APIStatusError):
        headers = exc.response.headers
        try:
            if (ms := headers.get("retry-after-ms")) is not None:
                return min(float(ms) / 1000, RETRY_MAX_S * 4)
            if (seconds := headers.get("retry-after")) is not None:
                return min(float(seconds), RETRY_MAX_S * 4)
        except ValueError:
            pass
    return float(min(RETRY_MAX_S, base_s * 2**attempt) * (0.75 + random.random() / 2))


def _status_explanation(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        message = inner.get("message") if isinstance(inner, dict) else inner
        if message:
            return message if isinstance(message, str) else json.dumps(message, ensure_ascii=False)
        return json.dumps(body, ensure_ascii=False)
    if body is not None:
        return str(body)
    return exc.message


def model_error(exc: Exception, *, streaming: bool, secrets: Iterable[str] = ()) -> ModelError:
    """Map an SDK error to a ``ModelError`` code; ``streaming``: chunks may already have been yielded."""
    details: dict[str, Any] = {"error": type(exc).__name__}
    if isinstance(exc, openai.APITimeoutError):
        return ModelError("the model did not answer in time", code="model_timeout", details=details)
    if streaming:
        return ModelError(f"the model stream broke off: {exc}", code="model_stream_interrupted", details=details)
    if isinstance(exc, openai.APIConnectionError):
        return ModelError(f"the model endpoint is unreachable: {exc}", code="model_unavailable", details=details)
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        details["status"] = status
        explanation = explain_rejection(_status_explanation(exc), secrets=secrets)
        if status == 429:
            return ModelError("the model endpoint is rate-limiting us", code="model_rate_limited", details=details)
        if status == 408:
            return ModelError("the model endpoint timed out the request", code="model_timeout", details=details)
        rejected = (400 <= status < 500 and status not in (401, 403, 409)) or (
            status >= 500 and _VALIDATION_BODY.search(explanation) is not None
        )
        if rejected:
            details["explanation"] = explanation
            details["rejected"] = "history" if _HISTORY_HINT.search(explanation) else "request"
            return ModelError(
                f"the model endpoint rejected the request (HTTP {status}): {explanation}",
                code="model_rejected_request",
                details=details,
            )
        return ModelError(
            f"the model endpoint failed with HTTP {status}: {explanation}", code="model_unavailable", details=details
        )
    return ModelError(f"the model call failed: {exc}", code="model_unavailable", details=details)
