"""Each tenant's webhook signing secret in Secrets Manager (``<prefix>/<tenantId>``), created on first use and
reused per container for :data:`CACHE_TTL_S`.

Two containers creating the same tenant's secret at once: one ``CreateSecret`` wins, the other gets
``ResourceExistsException`` and reads the winner's value, so every signature of a tenant uses one secret.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

from shared.webhooks.signing import new_secret

CACHE_TTL_S = 300.0


class SecretsManagerWebhookSecrets:
    def __init__(
        self,
        client: Callable[[], Any],
        *,
        prefix: str,
        ttl_s: float = CACHE_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._make_client = client
        self._client: Any = None
        self._prefix = prefix.rstrip("/")
        self._ttl_s = ttl_s
        self._clock = clock
        self._cache: dict[str, tuple[float, str]] = {}

    def _sm(self) -> Any:
        if self._client is None:
            self._client = self._make_client()
        return self._client

    def name(self, tenant_id: str) -> str:
        return f"{self._prefix}/{tenant_id}"

    async def secret(self, tenant_id: str) -> str:
        cached = self._cache.get(tenant_id)
        if cached is not None and self._clock() - cached[0] < self._ttl_s:
            return cached[1]
        value = await asyncio.to_thread(self._read_or_create, tenant_id)
        self._cache[tenant_id] = (self._clock(), value)
        return value

    async def rotate(self, tenant_id: str) -> str:
        value = new_secret()
        await asyncio.to_thread(self._put, tenant_id, value)
        self._cache[tenant_id] = (self._clock(), value)
        return value

    def _put(self, tenant_id: str, value: str) -> None:
        try:
            self._sm().put_secret_value(SecretId=self.name(tenant_id), SecretString=value)
            return
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ResourceNotFoundException":
                raise
        self._create(tenant_id, value)

    def _create(self, tenant_id: str, value: str) -> None:
        self._sm().create_secret(
            Name=self.name(tenant_id),
            SecretString=value,
            Description="Signs the webhooks of this tenant's runs (Standard Webhooks)",
            Tags=[{"Key": "purpose", "Value": "webhook-signing"}],
        )

    def _read_or_create(self, tenant_id: str) -> str:
        name = self.name(tenant_id)
        try:
            return str(self._sm().get_secret_value(SecretId=name)["SecretString"])
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ResourceNotFoundException":
                raise
        try:
            value = new_secret()
            self._create(tenant_id, value)
            return value
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ResourceExistsException":
                raise
        return str(self._sm().get_secret_value(SecretId=name)["SecretString"])
