"""A tenant administrator's webhooks (``GET``/``PUT``/``DELETE /api/v1/admin/webhooks`` and
``POST /api/v1/admin/webhooks/secret``, scope ``agent:admin``): the targets every run of the tenant's users is
POSTed to when it ends, besides a run's own ``forwardedProps.webhook``, and the tenant's signing secret.

Targets are checked as every outgoing URL is (``shared.url_safety``: ``422 unsafe_url`` naming ``urls[i]``) before
anything is stored, and again before each delivery. The secret is never shown by ``GET``: ``POST .../secret``
makes a new one and answers it, once.
"""

from __future__ import annotations

from typing import Any

from shared.errors import InvalidRequest
from shared.models import Identity
from shared.url_safety import check_url
from shared.webhooks.ports import WebhookRegistry, WebhookSecrets

MAX_TARGETS = 5


def _invalid(message: str, loc: list[Any]) -> InvalidRequest:
    return InvalidRequest(message, details=[{"loc": loc, "msg": message, "type": "value_error"}])


class WebhookAdmin:
    def __init__(self, registry: WebhookRegistry, secrets: WebhookSecrets, *, allow_loopback: bool = False) -> None:
        self._registry = registry
        self._secrets = secrets
        self._allow_loopback = allow_loopback

    async def targets(self, admin: Identity) -> dict[str, Any]:
        return {"urls": await self._registry.targets(admin.tenant_id)}

    async def put_targets(self, admin: Identity, body: Any) -> dict[str, Any]:
        """Replace the tenant's targets with ``body["urls"]`` (1 to :data:`MAX_TARGETS` distinct URLs).

        Raises:
            InvalidRequest: the body's shape (``invalid_request``) or a URL (``unsafe_url``).
        """
        urls = body.get("urls") if isinstance(body, dict) else None
        if not isinstance(body, dict) or set(body) != {"urls"} or not isinstance(urls, list):
            raise _invalid('the body must be {"urls": [...]}', ["body"])
        if not 1 <= len(urls) <= MAX_TARGETS or len(set(map(str, urls))) != len(urls):
            raise _invalid(f"urls must hold 1 to {MAX_TARGETS} distinct URLs", ["body", "urls"])
        for index, url in enumerate(urls):
            if not isinstance(url, str):
                raise _invalid("must be a string", ["body", "urls", index])
            await check_url(url, allow_loopback=self._allow_loopback, field=f"body.urls.{index}")
        await self._registry.put_targets(admin.tenant_id, urls)
        return {"urls": list(urls)}

    async def delete_targets(self, admin: Identity) -> None:
        await self._registry.put_targets(admin.tenant_id, [])

    async def new_secret(self, admin: Identity) -> dict[str, Any]:
        """A new signing secret for the tenant, in use from now on (the webhook function's containers pick it up
        within their cache's 5 minutes): answered once, never shown again."""
        return {"secret": await self._secrets.rotate(admin.tenant_id)}
