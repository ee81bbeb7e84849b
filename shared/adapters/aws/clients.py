"""boto3 client factories. Clients are created on first use, never at import time (cold start, moto)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import boto3
from botocore.config import Config

# Standard retry mode (throttling and transient errors, exponential backoff with jitter), bounded so a user-facing
# request gives up in seconds rather than after botocore's DynamoDB default of 10 legacy attempts.
_RETRIES = Config(retries={"mode": "standard", "max_attempts": 5}, connect_timeout=3, read_timeout=10)


_one_call_at_a_time: threading.RLock | None = None


def serialise_calls(on: bool = True) -> None:
    """From now on, every client this module builds sends one request at a time, process-wide.

    Only for an in-process emulation (``make dev``: moto's ``mock_aws``), which is not thread-safe: concurrent
    requests from the store's worker threads can corrupt it or raise "dictionary changed size during iteration"
    (seen as a spurious 503). DynamoDB itself is thread-safe; never call this in a deployed function. Single
    requests are serialised, not whole store operations, so the stores' conditional-write races stay real.
    """
    global _one_call_at_a_time
    if not on:
        _one_call_at_a_time = None
    elif _one_call_at_a_time is None:
        _one_call_at_a_time = threading.RLock()


def call_lock() -> threading.RLock | None:
    """The process-wide lock of :func:`serialise_calls`, or None when calls are not serialised."""
    return _one_call_at_a_time


class OneCallAtATime:
    """A boto3 client whose method calls hold one lock (shared by every client that was given the same lock)."""

    def __init__(self, client: Any, lock: threading.RLock) -> None:
        self._client = client
        self._lock = lock

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return attr(*args, **kwargs)

        return call


def serialised(client: Any) -> Any:
    """``client`` itself, or, after :func:`serialise_calls`, the client behind the process-wide lock."""
    return client if _one_call_at_a_time is None else OneCallAtATime(client, _one_call_at_a_time)


# S3 signs with SigV4 (presigned URLs included: SigV2 is refused by newer regions and caps nothing).
_SERVICE_CONFIG = {"s3": Config(signature_version="s3v4")}


def client_factory(service: str, *, region: str, endpoint_url: str | None = None) -> Callable[[], Any]:
    config = _RETRIES.merge(_SERVICE_CONFIG[service]) if service in _SERVICE_CONFIG else _RETRIES

    def make() -> Any:
        return serialised(
            boto3.client(  # type: ignore[call-overload]
                service, region_name=region, endpoint_url=endpoint_url, config=config
            )
        )

    return make
