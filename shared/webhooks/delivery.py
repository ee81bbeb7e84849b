"""Delivering a run's end to its webhook: the run read from the ledger, its status document signed and POSTed.

The webhook function calls :meth:`WebhookDelivery.deliver` for each run-ended event it takes from the webhook
queue. A target that answers anything but 2xx, or does not answer within the timeout, makes :meth:`deliver` raise
:class:`DeliveryFailed`, and the queue redelivers the event later (with backoff, then its dead-letter queue):
delivery is at least once. Every attempt keeps the same ``webhook-id`` for a given run and target, so a receiver
that sees an id twice can drop the second. A target whose name now resolves to an address the server must not call
(``shared.url_safety``) is refused and never retried.

Each attempt and its outcome is an audit record of the run's thread (kind ``webhook_delivery``): the target's
origin (never its path or query, which may hold a token), the event type, the attempt, the outcome
(``delivered``, ``failed`` or ``refused``) and the status code or reason.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from shared.errors import InvalidRequest
from shared.models import AuditRecord, Run, digest, utc_now
from shared.ports import AuditLog, RunLedger
from shared.runs.status_document import public_status, status_document
from shared.url_safety import Resolver, check_url, resolve
from shared.webhooks.ports import PostFailed, WebhookPoster, WebhookRegistry, WebhookSecrets
from shared.webhooks.signing import signed_headers

logger = logging.getLogger(__name__)

AUDIT_KIND = "webhook_delivery"
DEFAULT_TIMEOUT_S = 5.0
EVENT_TYPES = {
    "succeeded": "run.succeeded",
    "failed": "run.failed",
    "cancelled": "run.cancelled",
    "interrupted": "run.interrupted",
}
"""The event type of each status a run can end in (a run still ``queued`` or ``running`` sends nothing)."""


@dataclass(frozen=True, slots=True)
class RunEnded:
    """Which run ended, and how (the ``RUN_FINISHED`` outcome in wire form, when it finished): the detail of the
    run-ended event (``shared.memory.trigger``)."""

    tenant_id: str
    thread_id: str
    run_id: str
    outcome: Mapping[str, Any] | None = None


class RunNotSettled(Exception):
    """The event came before the ledger shows the run's end (the queue delivers it again later)."""


class DeliveryFailed(Exception):
    """A target did not take the event (non-2xx or no answer): the queue delivers it again later."""

    def __init__(self, failures: Sequence[str]) -> None:
        super().__init__("; ".join(failures))
        self.failures = tuple(failures)


@dataclass
class DeliveryReport:
    """What one :meth:`WebhookDelivery.deliver` call did, per outcome (target origins)."""

    event_type: str | None = None
    delivered: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)


def origin(url: str) -> str:
    """``scheme://host[:port]``: what an audit record or a log line may say about a target."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rsplit('@', 1)[-1]}"


def webhook_id(run_id: str, url: str) -> str:
    """The ``webhook-id`` of a run's event to one target: the same on every attempt."""
    return f"msg_{run_id}_{digest(url)[:16]}"


def targets_of(run: Run, registered: Sequence[str]) -> list[str]:
    """The run's own target, then the tenant's registered ones, each once."""
    return list(dict.fromkeys([*([run.webhook] if run.webhook else []), *registered]))


class WebhookDelivery:
    """Signs and POSTs run-ended events to the run's own webhook target and to the tenant's registered ones."""

    def __init__(
        self,
        runs: RunLedger,
        audit: AuditLog,
        secrets: WebhookSecrets,
        poster: WebhookPoster,
        *,
        allow_loopback: bool = False,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        resolver: Resolver = resolve,
        registry: WebhookRegistry | None = None,
    ) -> None:
        self._runs = runs
        self._registry = registry
        self._audit = audit
        self._secrets = secrets
        self._poster = poster
        self._allow_loopback = allow_loopback
        self._timeout_s = timeout_s
        self._resolver = resolver

    async def deliver(self, ended: RunEnded, *, attempt: int = 1, now: datetime | None = None) -> DeliveryReport:
        """Send the run's event to each of its targets; what happened to each.

        Raises:
            RunNotSettled: the ledger does not show the run's end yet.
            DeliveryFailed: some target did not take it (the others did, or were refused).
        """
        run = await self._runs.get_run(ended.tenant_id, ended.run_id)
        report = DeliveryReport()
        if run is None:
            return report
        registered = await self._registry.targets(run.tenant_id) if self._registry is not None else []
        targets = targets_of(run, registered)
        if not targets:
            return report
        if not run.status.is_terminal:
            raise RunNotSettled(ended.run_id)
        status = public_status(run, ended.outcome)
        event_type = EVENT_TYPES[status]
        report.event_type = event_type
        sent_at = now or utc_now()
        body = json.dumps(
            {"type": event_type, "timestamp": sent_at.isoformat(), "data": status_document(run, ended.outcome)},
            separators=(",", ":"),
        ).encode()
        for url in targets:
            outcome, detail = await self._send(run, url, body, sent_at)
            getattr(report, outcome).append(origin(url))
            await self._record(run, url, event_type, attempt, outcome, detail)
        if report.failed:
            raise DeliveryFailed(report.failed)
        return report

    async def _send(self, run: Run, url: str, body: bytes, sent_at: datetime) -> tuple[str, dict[str, Any]]:
        try:
            addresses = await check_url(url, allow_loopback=self._allow_loopback, resolver=self._resolver)
        except InvalidRequest as exc:
            return "refused", {"reason": exc.message}
        headers = signed_headers(await self._secrets.secret(run.tenant_id), webhook_id(run.run_id, url), sent_at, body)
        try:
            code = await self._poster.post(
                url, addresses=addresses, body=body, headers=headers, timeout_s=self._timeout_s
            )
        except PostFailed as exc:
            return "failed", {"reason": str(exc)[:200] or type(exc).__name__}
        return ("delivered" if 200 <= code < 300 else "failed"), {"statusCode": code}

    async def _record(
        self, run: Run, url: str, event_type: str, attempt: int, outcome: str, detail: dict[str, Any]
    ) -> None:
        details = {"target": origin(url), "eventType": event_type, "attempt": attempt, "outcome": outcome, **detail}
        log = logger.warning if outcome != "delivered" else logger.info
        log("webhook %s", outcome, extra={"run_id": run.run_id, **details})
        try:
            await self._audit.record(
                AuditRecord(
                    kind=AUDIT_KIND,
                    tenant_id=run.tenant_id,
                    thread_id=run.thread_id,
                    run_id=run.run_id,
                    user_id=run.user_id,
                    details=details,
                )
            )
        except Exception:
            logger.exception("webhook audit record not written", extra={"run_id": run.run_id})
