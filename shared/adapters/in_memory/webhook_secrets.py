"""Each tenant's webhook signing secret kept in the process (``make dev``, tests), created on first use."""

from __future__ import annotations

from shared.webhooks.signing import new_secret


class InMemoryWebhookSecrets:
    def __init__(self, secrets: dict[str, str] | None = None) -> None:
        self.secrets: dict[str, str] = dict(secrets or {})

    async def secret(self, tenant_id: str) -> str:
        return self.secrets.setdefault(tenant_id, new_secret())

    async def rotate(self, tenant_id: str) -> str:
        self.secrets[tenant_id] = new_secret()
        return self.secrets[tenant_id]
