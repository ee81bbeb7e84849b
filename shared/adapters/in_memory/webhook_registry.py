"""The webhooks each tenant registered, kept in the process (``make dev``, tests); the reference of
tests/contract/test_webhook_registry_contract.py."""

from __future__ import annotations

from collections.abc import Sequence


class InMemoryWebhookRegistry:
    def __init__(self) -> None:
        self._targets: dict[str, list[str]] = {}

    async def targets(self, tenant_id: str) -> list[str]:
        return list(self._targets.get(tenant_id, []))

    async def put_targets(self, tenant_id: str, urls: Sequence[str]) -> None:
        if urls:
            self._targets[tenant_id] = list(urls)
        else:
            self._targets.pop(tenant_id, None)
