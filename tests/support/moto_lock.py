"""Serialises calls to moto's in-process backend, which is not thread-safe (DynamoDB itself is)."""

from __future__ import annotations

import threading
from typing import Any

from shared.adapters.aws.clients import call_lock

_LOCK = threading.RLock()


class OneRequestAtATime:
    """A DynamoDB client proxy that serialises requests.

    moto's in-process backend is not thread-safe: the requests ``DynamoDBStore`` sends from worker threads corrupt
    it or raise "dictionary changed size during iteration". DynamoDB itself is. Serialising single requests (not
    whole store operations) keeps the store's read-counter/conditional-write race between tasks intact.
    """

    def __init__(self, client: Any) -> None:
        self._client = client
        # The process-wide lock of an in-process moto (the ``aws`` fixture turns it on), so that this client and
        # the clients the services build themselves (memory store, pending markers, ...) never overlap.
        self._lock = call_lock() or _LOCK

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return attr(*args, **kwargs)

        return call
