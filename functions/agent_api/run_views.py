"""The JSON of a run's status document (``GET /api/v1/agent/runs/{runId}``), also each item of a thread's runs
(docs/protocols/agent/api-endpoints.md): camelCase, and a field that does not apply is left out, never null."""

from __future__ import annotations

from typing import Any

from shared.models import RunStatus
from shared.runs.outcomes import ledger_error, ledger_outcome, usage_metadata, usage_to_agui
from shared.runs.status import RunReport


def run_status_view(report: RunReport) -> dict[str, Any]:
    run = report.run
    view: dict[str, Any] = {
        "runId": run.run_id,
        "threadId": run.thread_id,
        "status": report.status,
        "createdAt": run.created_at.isoformat(),
        "usage": [u.model_dump(by_alias=True, exclude_none=True) for u in usage_to_agui(run.usage)],
    }
    if usage_metadata(run.usage):
        view["usageEstimated"] = True
    if not run.status.is_terminal:
        if run.status is RunStatus.RUNNING:  # a queued run has no lease yet
            view["heartbeatAt"] = run.heartbeat_at.isoformat()
        if run.cancel_requested:
            view["cancelRequested"] = True
    elif run.status is RunStatus.FAILED:
        code, message = ledger_error(run)
        view["endedAt"] = run.updated_at.isoformat()
        view["error"] = {"code": code, "message": message}
    else:
        view["endedAt"] = run.updated_at.isoformat()
        view["outcome"] = ledger_outcome(run)
    if report.messages is not None:
        view["messageIds"] = list(report.messages.ids)
        if not report.messages.complete:
            view["messageIdsComplete"] = False
    return view


def queued_run_view(run_id: str, thread_id: str) -> dict[str, Any]:
    """A run waiting in its thread's queue (the ``enqueue`` strategy): no ledger record yet, so nothing more."""
    return {"runId": run_id, "threadId": thread_id, "status": "queued", "messageIds": []}
