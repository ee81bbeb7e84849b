"""Serialises calls to moto's in-process backend, which is not thread-safe (DynamoDB itself is)."""

from __future__ import annotations

import threading
from typing import Any


class OneRequestAtATime:
    """A DynamoDB client proxy that serialises requests.

    moto's in-process backend is not thread-safe: the requests ``DynamoDBStore`` sends from worker threads corrupt
    it or raise "dictionary changed size during iteration". DynamoDB itself is. Serialising single requests (not
    whole store operations) keeps the store's read-counter/conditional-write race between tasks intact.
    """

    def __init__(self, client: Any) -> None:
        self._client = client
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return attr(*args, **kwargs)

        return call
