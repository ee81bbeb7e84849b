"""Serialises calls to moto's in-process backend, which is not thread-safe (DynamoDB itself is)."""

from __future__ import annotations

import threading
from typing import Any

from shared.adapters.aws.clients import OneCallAtATime, call_lock

_LOCK = threading.RLock()


class OneRequestAtATime(OneCallAtATime):
    """A client whose requests hold the process-wide lock of an in-process moto (the ``aws`` fixture turns it on, so
    this client and the clients the services build themselves never overlap), else a lock of this module's.

    moto's in-process backend is not thread-safe: the requests ``DynamoDBStore`` sends from worker threads corrupt
    it or raise "dictionary changed size during iteration". DynamoDB itself is. Serialising single requests (not
    whole store operations) keeps the store's read-counter/conditional-write race between tasks intact.
    """

    def __init__(self, client: Any) -> None:
        super().__init__(client, call_lock() or _LOCK)
