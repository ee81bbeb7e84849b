"""boto3 client factories. Clients are created on first use, never at import time (cold start, moto)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import boto3
from botocore.config import Config

# Standard retry mode (throttling and transient errors, exponential backoff with jitter), bounded so a user-facing
# request gives up in seconds rather than after botocore's DynamoDB default of 10 legacy attempts.
_RETRIES = Config(retries={"mode": "standard", "max_attempts": 5}, connect_timeout=3, read_timeout=10)


def client_factory(service: str, *, region: str, endpoint_url: str | None = None) -> Callable[[], Any]:
    def make() -> Any:
        return boto3.client(  # type: ignore[call-overload]
            service, region_name=region, endpoint_url=endpoint_url, config=_RETRIES
        )

    return make
