"""Webhook delivery: the tenants' signing secrets (Secrets Manager; in the process for ``make dev``), the HTTP
poster, and the delivery service the webhook function and the local runner's in-process consumer call."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

from shared.wiring.overrides import overridable
from shared.wiring.stores import StoreProviders

if TYPE_CHECKING:
    from shared.adapters.aws.queue_backoff import SqsBackoff
    from shared.webhooks.admin import WebhookAdmin
    from shared.webhooks.delivery import WebhookDelivery
    from shared.webhooks.ports import WebhookPoster, WebhookRegistry, WebhookSecrets


class WebhookProviders(StoreProviders):
    """What sends a run's webhook when it ends."""

    @overridable("webhook_secrets")
    def webhook_secrets(self) -> WebhookSecrets:
        """Secrets Manager (``<WEBHOOK_SECRET_PREFIX>/<tenantId>``); the embedded local runner keeps them in memory."""
        if self.settings.embedded:
            from shared.adapters.in_memory.webhook_secrets import InMemoryWebhookSecrets

            return InMemoryWebhookSecrets()
        from shared.adapters.aws.clients import client_factory
        from shared.adapters.aws.webhook_secrets import SecretsManagerWebhookSecrets

        return SecretsManagerWebhookSecrets(
            client_factory("secretsmanager", region=self.settings.aws_region),
            prefix=self.settings.webhook_secret_prefix,
        )

    @cached_property
    def webhook_registry(self) -> WebhookRegistry:
        """The tenants' registered webhooks: on the main table (the in-memory store gets the in-memory registry)."""
        from shared.adapters.aws.dynamodb_store import DynamoDBStore

        store = self.store
        if isinstance(store, DynamoDBStore):
            from shared.adapters.aws.webhook_registry import DynamoDBWebhookRegistry

            threads = store.threads
            return DynamoDBWebhookRegistry(threads.table_name, lambda: threads.client)
        from shared.adapters.in_memory.webhook_registry import InMemoryWebhookRegistry

        return InMemoryWebhookRegistry()

    @overridable("webhook_poster")
    def webhook_poster(self) -> WebhookPoster:
        from shared.adapters.webhook_http import HttpWebhookPoster

        return HttpWebhookPoster()

    @cached_property
    def webhook_backoff(self) -> SqsBackoff | None:
        """Stretches a failed record's visibility (``WEBHOOK_QUEUE_URL``); None without a queue (make dev, tests)."""
        queue_url = self.settings.webhook_queue_url
        if not queue_url:
            return None
        from shared.adapters.aws.clients import client_factory
        from shared.adapters.aws.queue_backoff import SqsBackoff

        return SqsBackoff(client_factory("sqs", region=self.settings.aws_region), queue_url)

    @cached_property
    def webhook_delivery(self) -> WebhookDelivery:
        from shared.webhooks.delivery import WebhookDelivery

        return WebhookDelivery(
            self.run_ledger,
            self.audit_log,
            self.webhook_secrets,
            self.webhook_poster,
            allow_loopback=self.settings.webhook_allow_loopback,
            timeout_s=self.settings.webhook_timeout_s,
            registry=self.webhook_registry,
        )

    @cached_property
    def webhook_admin(self) -> WebhookAdmin:
        """A tenant administrator's webhook targets and signing secret (the admin routes)."""
        from shared.webhooks.admin import WebhookAdmin

        return WebhookAdmin(
            self.webhook_registry, self.webhook_secrets, allow_loopback=self.settings.webhook_allow_loopback
        )
