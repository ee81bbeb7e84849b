"""A run's status document: the JSON a webhook carries when the run ends (and what ``GET
/api/v1/agent/runs/{runId}`` can answer with), rendered from the run's ledger record alone.

camelCase, and a field that does not apply is left out, never null. The client-facing status adds one value to
the ledger's: a run that ended on an approval interrupt is ``succeeded`` in the ledger (it did its work) and
``interrupted`` here, the state a client acts on. How the run ended (``outcome``: the ``RUN_FINISHED`` outcome in
wire form) is given by the caller when the record does not carry it: the run-ended event does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from shared.models import Run, RunStatus
from shared.runs.outcomes import LEGACY_ERROR_CODES, RUN_ERROR_MESSAGES, usage_metadata, usage_to_agui

PublicStatus = Literal["queued", "running", "interrupted", "succeeded", "failed", "cancelled"]


def public_status(run: Run, outcome: Mapping[str, Any] | None = None) -> PublicStatus:
    """The status a client sees: the ledger's, with a run that ended on an interrupt shown as ``interrupted``."""
    if run.status is RunStatus.SUCCEEDED and outcome is not None and outcome.get("type") == "interrupt":
        return "interrupted"
    return run.status.value


def error_of(run: Run) -> dict[str, str]:
    """A failed run's documented ``RUN_ERROR`` code and the sentence a person sees (never a provider's text)."""
    stored = run.error_code or "run_failed"
    code = LEGACY_ERROR_CODES.get(stored, stored)
    code = code if code in RUN_ERROR_MESSAGES else "run_failed"
    return {"code": code, "message": RUN_ERROR_MESSAGES[code]}


def status_document(run: Run, outcome: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The status document of ``run``; ``outcome``: how it ended, when the record does not say (see the module
    docstring). A run still going has its last heartbeat; an ended one its end time and its outcome or error."""
    document: dict[str, Any] = {
        "runId": run.run_id,
        "threadId": run.thread_id,
        "status": public_status(run, outcome),
        "createdAt": run.created_at.isoformat(),
        "usage": [u.model_dump(mode="json", by_alias=True, exclude_none=True) for u in usage_to_agui(run.usage)],
    }
    if usage_metadata(run.usage):
        document["usageEstimated"] = True
    if not run.status.is_terminal:
        document["heartbeatAt"] = run.heartbeat_at.isoformat()
        if run.cancel_requested:
            document["cancelRequested"] = True
        return document
    document["endedAt"] = run.updated_at.isoformat()
    if run.status is RunStatus.FAILED:
        document["error"] = error_of(run)
    elif run.status is RunStatus.CANCELLED:
        document["outcome"] = {"type": "cancelled"}
    else:
        document["outcome"] = dict(outcome) if outcome is not None else {"type": "success"}
    return document
