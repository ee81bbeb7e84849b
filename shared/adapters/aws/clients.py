"""boto3 client factories. Clients are created on first use, never at import time (cold start, moto)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import boto3


def client_factory(service: str, *, region: str, endpoint_url: str | None = None) -> Callable[[], Any]:
    def make() -> Any:
        return boto3.client(service, region_name=region, endpoint_url=endpoint_url)  # type: ignore[call-overload]

    return make
