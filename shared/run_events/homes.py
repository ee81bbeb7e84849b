"""Where a run's events live: its *home* stream, and how a reader finds the run's entries in it.

Each event is written once (``RunEmitter``): a visible run's events go to its thread's stream, tagged with
``metadata.runId``, and a reader of the run reads that stream from shortly before the run was created, skipping
other runs' entries; a hidden run's go to its own run stream. docs/storage.md ("Redis streams") says why.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.models import Run
from shared.ports import StreamEntry
from shared.stream_keys import run_stream_key, thread_stream_key

START_SKEW_MS = 60_000
"""A visible run's replay starts this long before the run's record was created: the stream's entry ids are the
Redis server's clock, the record's time the app's, and a clock skew must never cut the run's first events off."""


@dataclass(frozen=True, slots=True)
class RunHome:
    """A run's home stream: its key, the cursor its replay starts after, and (on a thread stream) the run whose
    entries are its own."""

    key: str
    start: str = "0-0"
    run_id: str | None = None
    """Set on a thread stream: entries whose ``metadata.runId`` differs belong to other runs."""

    def owns(self, entry: StreamEntry) -> bool:
        """Whether ``entry`` is one of the run's events."""
        if self.run_id is None:
            return True
        metadata = entry.event.get("metadata")
        return isinstance(metadata, dict) and metadata.get("runId") == self.run_id


def run_home(run: Run) -> RunHome:
    """The home of a recorded run."""
    if run.meta.hidden_from_user:
        return RunHome(run_stream_key(run.tenant_id, run.run_id))
    start_ms = max(0, int(run.created_at.timestamp() * 1000) - START_SKEW_MS)
    return RunHome(thread_stream_key(run.tenant_id, run.thread_id), f"{start_ms}-0", run.run_id)


def unrecorded_home(tenant_id: str, run_id: str) -> RunHome:
    """The home of a run the ledger does not know (or could not be read): its own run stream."""
    return RunHome(run_stream_key(tenant_id, run_id))
