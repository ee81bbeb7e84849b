"""A run's status document (``GET /api/v1/agent/runs/{runId}``) and a thread's runs, newest first
(``GET /api/v1/threads/{threadId}/runs``): read from the run ledger, never from the run's stream.

The ledger keeps a run that ended on an interrupt as ``succeeded`` with its ``interrupts`` (every consumer of the
ledger, the limits and the metrics among them, counts it as a run that did its work); here it is ``interrupted``,
the state a client acts on. The ids of the messages a run stored are read from the thread (``run_message_ids``),
starting at the run's first message, so the ledger's hot writes (admission, heartbeats, the end) carry no list of
ids; docs/storage.md says what the read costs.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from shared.errors import InvalidRequest, NotFound
from shared.models import Identity, Run, RunStatus
from shared.ports import RunLedger, RunPosition, ThreadStore
from shared.ports.threads import RunMessageIds

PublicStatus = Literal["queued", "running", "interrupted", "succeeded", "failed", "cancelled"]

MESSAGE_SCAN_LIMIT = 200
"""The most messages of the thread read to find a run's own (from its first one on): past it, the document says
its list may be incomplete (``messageIdsComplete: false``)."""


def public_status(run: Run) -> PublicStatus:
    """The status a client sees: the ledger's, with a run that ended on an interrupt shown as ``interrupted``."""
    if run.status is RunStatus.SUCCEEDED and run.interrupts:
        return "interrupted"
    return run.status.value  # every other value is its own name


def is_visible(run: Run | None, identity: Identity, *, include_hidden: bool = False) -> bool:
    """Whether ``identity`` may see ``run``: its own, and not hidden from it (unless ``include_hidden``). Anything
    else is answered as absent (404, never 403)."""
    if run is None or run.user_id != identity.user_id:
        return False
    return include_hidden or not run.meta.hidden_from_user


@dataclass(frozen=True, slots=True)
class RunReport:
    """A run as its status document shows it."""

    run: Run
    status: PublicStatus
    messages: RunMessageIds | None = None
    """The ids of the messages it stored; None in a listing (one more read per run)."""


@dataclass(frozen=True, slots=True)
class RunPage:
    items: tuple[RunReport, ...]
    next_cursor: str | None


class RunStatuses:
    """Reads the caller's runs for the status endpoints."""

    def __init__(self, threads: ThreadStore, runs: RunLedger) -> None:
        self._threads = threads
        self._runs = runs

    async def report(self, identity: Identity, run_id: str) -> RunReport:
        """The caller's run with the ids of the messages it stored: a GetItem, then the thread's messages from the
        run's first one. NotFound for a run of another user or tenant, or one hidden from the caller."""
        run = await self._runs.get_run(identity.tenant_id, run_id)
        if run is None or not is_visible(run, identity):
            raise NotFound("run not found")
        messages = await self._threads.run_message_ids(
            identity.tenant_id, run.thread_id, run.run_id, after_seq=run.after_seq or 0, scan_limit=MESSAGE_SCAN_LIMIT
        )
        return RunReport(run, public_status(run), messages)

    async def thread_runs(self, identity: Identity, thread_id: str, *, limit: int, cursor: str | None) -> RunPage:
        """The caller's thread's runs, newest first, ``limit`` read a page (runs hidden from the caller are left
        out, so a page can hold fewer). NotFound when the thread is not the caller's."""
        below = decode_cursor(cursor, thread_id) if cursor else None
        await self._threads.get_thread(identity, thread_id)
        runs = await self._runs.page_thread_runs(identity.tenant_id, thread_id, limit=limit, below=below)
        shown = tuple(RunReport(r, public_status(r)) for r in runs if is_visible(r, identity))
        last = runs[-1] if len(runs) == limit else None
        return RunPage(shown, encode_cursor(thread_id, last) if last is not None else None)


def encode_cursor(thread_id: str, run: Run) -> str:
    """Where the next page starts: opaque to the client, and tied to its thread."""
    value = {"t": thread_id, "c": run.created_at.isoformat(), "r": run.run_id}
    return base64.urlsafe_b64encode(json.dumps(value, separators=(",", ":")).encode()).decode()


def decode_cursor(cursor: str, thread_id: str) -> RunPosition:
    """The position a cursor names; ``invalid_cursor`` for anything not made by :func:`encode_cursor` for this
    thread (a cursor is client-held: it never reaches the store unchecked)."""
    try:
        value = json.loads(base64.urlsafe_b64decode(cursor.encode()))
        if not isinstance(value, dict) or set(value) != {"t", "c", "r"} or value["t"] != thread_id:
            raise ValueError("not this thread's cursor")
        if not isinstance(value["r"], str) or not isinstance(value["c"], str):
            raise ValueError("malformed position")
        return RunPosition(created_at=datetime.fromisoformat(value["c"]), run_id=value["r"])
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError) as exc:
        raise InvalidRequest("malformed cursor", code="invalid_cursor") from exc
