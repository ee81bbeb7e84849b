"""What webhook delivery needs from outside: each tenant's signing secret, the webhooks a tenant registered, and a
way to POST.

Adapters: ``SecretsManagerWebhookSecrets`` (shared/adapters/aws/webhook_secrets.py) and ``InMemoryWebhookSecrets``
(``make dev``, tests); ``DynamoDBWebhookRegistry`` (shared/adapters/aws/webhook_registry.py) and
``InMemoryWebhookRegistry``, contract: tests/contract/test_webhook_registry_contract.py; ``HttpWebhookPoster``
(shared/adapters/webhook_http.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol


class WebhookSecrets(Protocol):
    """A tenant's signing secret (``whsec_...``), created on first use."""

    async def secret(self, tenant_id: str) -> str: ...

    async def rotate(self, tenant_id: str) -> str:
        """A new secret for the tenant (created if it had none), in use from now on; the new value."""
        ...


class WebhookRegistry(Protocol):
    """The webhook targets a tenant registered for all its users' runs (checked before they are stored)."""

    async def targets(self, tenant_id: str) -> list[str]: ...

    async def put_targets(self, tenant_id: str, urls: Sequence[str]) -> None:
        """Replace the tenant's targets with ``urls`` (an empty list removes them all)."""
        ...


class PostFailed(Exception):
    """The request did not get an answer: no connection, a TLS failure, a timeout."""


class WebhookPoster(Protocol):
    async def post(
        self, url: str, *, addresses: Sequence[str], body: bytes, headers: Mapping[str, str], timeout_s: float
    ) -> int:
        """POST ``body`` to ``url``, connecting only to one of ``addresses`` (what the URL check resolved, so a
        name that re-resolves elsewhere between the check and the connection is never followed); the status code.

        Raises:
            PostFailed: no answer within ``timeout_s``, or none at all.
        """
        ...
