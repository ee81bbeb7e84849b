"""DynamoDB throttling injected below botocore's retry layer, so the SDK's own retries are what is tested.

A ``before-send`` hook (registered ahead of moto's) answers chosen operations with HTTP 400
``ProvisionedThroughputExceededException``, exactly as DynamoDB does; botocore sees a throttling error and retries it
with its backoff, and only when the attempts run out does the store see the error. botocore calls every
``before-send`` handler and keeps the first response, so a throttled request is also pointed at an address moto does
not serve: moto must not apply a write that DynamoDB refused.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any

import boto3
from botocore.awsrequest import AWSResponse
from botocore.config import Config

from tests.support.settings import REGION

THROTTLE_CODE = "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException"


class _RawBody:
    def __init__(self, data: bytes) -> None:
        self._data = data

    def stream(self, **_kwargs: Any) -> Any:
        yield self._data

    def read(self, *_args: Any) -> bytes:
        data, self._data = self._data, b""
        return data


@dataclass
class Throttle:
    """Which operations to throttle, and how often; thread-safe (boto3 calls run in worker threads)."""

    operations: set[str] = field(default_factory=set)
    times: int | None = None  # None: until switched off
    skip: int = 0  # let this many matching calls through first
    throttled: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def on(self, *operations: str, times: int | None = None, skip: int = 0) -> None:
        with self._lock:
            self.operations, self.times, self.skip, self.throttled = set(operations), times, skip, 0

    def off(self) -> None:
        with self._lock:
            self.operations = set()

    def __call__(self, request: Any, **_kwargs: Any) -> AWSResponse | None:
        target = request.headers.get("X-Amz-Target", b"")
        operation = (target.decode() if isinstance(target, bytes) else str(target)).rsplit(".", 1)[-1]
        with self._lock:
            if operation not in self.operations:
                return None
            if self.skip > 0:
                self.skip -= 1
                return None
            if self.times is not None and self.throttled >= self.times:
                return None
            self.throttled += 1
        request.url = "https://throttled.invalid/"
        message = "The level of configured provisioned throughput for the table was exceeded."
        payload = json.dumps({"__type": THROTTLE_CODE, "message": message}).encode()
        headers = {"Content-Type": "application/x-amz-json-1.0", "x-amzn-RequestId": "throttled"}
        return AWSResponse(request.url, 400, headers, _RawBody(payload))


def throttled_client(throttle: Throttle, *, max_attempts: int = 3) -> Any:
    """A DynamoDB client (inside ``mock_aws``) whose requests pass through ``throttle`` before moto.

    Legacy retry mode (boto3's default) with few attempts keeps the backoff to tens of milliseconds.
    """
    client = boto3.client(
        "dynamodb", region_name=REGION, config=Config(retries={"mode": "legacy", "max_attempts": max_attempts})
    )
    client.meta.events.register_first("before-send.dynamodb", throttle)
    return client
