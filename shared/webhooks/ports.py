"""What webhook delivery needs from outside: each tenant's signing secret, and a way to POST.

Adapters: ``SecretsManagerWebhookSecrets`` (shared/adapters/aws/webhook_secrets.py) and ``InMemoryWebhookSecrets``
(``make dev``, tests); ``HttpWebhookPoster`` (shared/adapters/webhook_http.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol


class WebhookSecrets(Protocol):
    """A tenant's signing secret (``whsec_...``), created on first use."""

    async def secret(self, tenant_id: str) -> str: ...


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
