"""The end of a queued run that never ran: cancelled by its owner while it waited, or refused when its turn came.

No request waits to report it (a background run's client, or a queued request's client, has gone), so the ledger
gets a record of its end, which its status document reads, and the end is announced as any run's end is (the
run-ended event: its own webhook and the tenant's).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from shared.models import Run, RunStatus, utc_now
from shared.ports.run_queue import QueuedRun

logger = logging.getLogger(__name__)

RunEndedHook = Callable[[Run], Awaitable[None]]
"""Announces a queued run recorded as ended without having run (its webhook; the run-ended event of any run)."""


class EndRecords(Protocol):
    """The one ledger call (``RunLedger`` has it)."""

    async def create_run(self, run: Run) -> tuple[Run, bool]: ...


async def record_ended(
    runs: EndRecords,
    tenant_id: str,
    thread_id: str,
    entry: QueuedRun,
    status: RunStatus,
    error_code: str | None,
    on_ended: RunEndedHook | None,
) -> None:
    """Record ``entry``'s run as ended with ``status`` (``error_code`` for a failure), then announce it once (a
    record written before, by a concurrent call, is not announced again)."""
    now = utc_now()
    run = Run(
        run_id=entry.run_id,
        thread_id=thread_id,
        tenant_id=tenant_id,
        user_id=entry.user_id,
        status=status,
        created_at=entry.enqueued_at,
        updated_at=now,
        heartbeat_at=now,
        error_code=error_code,
        webhook=webhook_of(entry.body),
    )
    stored, created = await runs.create_run(run)
    if created and on_ended is not None:
        try:
            await on_ended(stored)
        except Exception:
            logger.exception("could not announce a queued run's end", extra={"run_id": entry.run_id})


def webhook_of(body: bytes) -> str | None:
    """``forwardedProps.webhook`` of a queued request's body (checked when it was accepted), for its end's event."""
    try:
        props = json.loads(body).get("forwardedProps")
    except (ValueError, AttributeError):
        return None
    url = props.get("webhook") if isinstance(props, dict) else None
    return url if isinstance(url, str) else None
