"""How a run ends, in the protocol's terms: the documented ``RUN_ERROR`` codes and messages (and which one a failure
gets), usage in AG-UI form, a terminal event rebuilt from the ledger, and how long an ended run's stream is kept.
Shared by the run service and the sweeper (which closes runs whose process stopped), so neither imports the other
for them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ag_ui.core import RunErrorEvent, RunFinishedEvent, TokenUsage

from shared.errors import AgentError, ModelError
from shared.models import Run, RunStatus, Usage, merge_usage

RUN_STREAM_TTL_S = 24 * 3600
"""The default retention of every stream key (``EVENT_STREAM_TTL_S``): 24 hours after its last write."""

# The RUN_ERROR codes of docs/protocols/agent/errors.md §3, each with the sentence a person sees. Provider messages
# are never passed on (they may carry internals); any other failure is ``run_failed``.
RUN_ERROR_MESSAGES: dict[str, str] = {
    "model_rate_limited": "The model provider is rate-limiting requests; try again shortly.",
    "model_unavailable": "The model provider is unavailable; try again shortly.",
    "model_timeout": "The model did not answer in time.",
    "model_stream_interrupted": "The model's answer broke off.",
    "model_rejected_request": (
        "The model provider rejected the request; sending it again will not help until the cause is fixed."
    ),
    "run_failed": "The run failed.",
    "run_deadline": "The run took longer than its time limit.",
    "run_not_started": "The run could not start when its turn came (a limit was reached meanwhile).",
    "run_time_limit": "The run reached the longest time its profile allows.",
}


def usage_to_agui(usage: Sequence[Usage]) -> list[TokenUsage]:
    out: list[TokenUsage] = []
    for u in merge_usage(list(usage)):
        fields: dict[str, Any] = {
            "provider": u.provider,
            "model": u.model,
            "input_tokens": u.input_tokens,
            "output_tokens": u.output_tokens,
            "total_tokens": u.input_tokens + u.output_tokens,
        }
        if u.reasoning_tokens:
            fields["reasoning_tokens"] = u.reasoning_tokens
        if u.cached_input_tokens:
            fields["cached_input_tokens"] = u.cached_input_tokens
        out.append(TokenUsage(**fields))
    return out


RUN_DEADLINE = "run_deadline"
HISTORY_REJECTED_MESSAGE = (
    "The model provider rejected this conversation's history; new messages on this thread will fail the same way "
    "until the cause is fixed."
)
LEGACY_ERROR_CODES = {"model_bad_request": "model_rejected_request"}
"""Codes stored by earlier versions, shown under their current name when a terminal event is rebuilt."""


def run_error_of(exc: BaseException) -> tuple[str, str]:
    """The documented ``RUN_ERROR`` code and message for a failure."""
    code = exc.code if isinstance(exc, AgentError) else "run_failed"
    if code not in RUN_ERROR_MESSAGES or (code.startswith("model_") and not isinstance(exc, ModelError)):
        code = "run_failed"
    details = exc.details if isinstance(exc, ModelError) and isinstance(exc.details, dict) else {}
    if code == "model_rejected_request" and details.get("rejected") == "history":
        return code, HISTORY_REJECTED_MESSAGE
    return code, RUN_ERROR_MESSAGES[code]


def usage_metadata(usage: Sequence[Usage]) -> dict[str, Any] | None:
    """``{"usageEstimated": true}`` when any count was estimated because the server reported no usage."""
    return {"usageEstimated": True} if any(u.estimated for u in usage) else None


def ledger_error(run: Run) -> tuple[str, str]:
    """A failed run's documented ``RUN_ERROR`` code and message, from its ledger record."""
    stored = run.error_code or "run_failed"
    code = LEGACY_ERROR_CODES.get(stored, stored)
    code = code if code in RUN_ERROR_MESSAGES else "run_failed"
    return code, RUN_ERROR_MESSAGES[code]


def ledger_outcome(run: Run) -> dict[str, Any]:
    """An ended run's ``RUN_FINISHED`` outcome (wire form), from its ledger record: cancelled, an interrupt with its
    interrupts, or success naming the front-end tool calls it left pending."""
    if run.status is RunStatus.CANCELLED:
        return {"type": "cancelled"}
    if run.interrupts:
        return {"type": "interrupt", "interrupts": list(run.interrupts)}
    if run.pending_tool_call_ids:
        return {"type": "success", "pendingToolCallIds": list(run.pending_tool_call_ids)}
    return {"type": "success"}


def terminal_from_ledger(run: Run) -> RunFinishedEvent | RunErrorEvent:
    """The terminal event of an ended run, rebuilt from its ledger record (for a stream that lacks one).

    ``metadata.rebuiltFromLedger`` tells a client that events before it may be missing from this stream: the
    run's messages are complete in the thread history.
    """
    usage = usage_to_agui(run.usage)
    metadata = {"rebuiltFromLedger": True, **(usage_metadata(run.usage) or {}), "runId": run.run_id}
    if run.status is RunStatus.FAILED:
        code, message = ledger_error(run)
        return RunErrorEvent(message=message, code=code, usage=usage, metadata=metadata)
    return RunFinishedEvent(
        thread_id=run.thread_id, run_id=run.run_id, outcome=ledger_outcome(run), usage=usage, metadata=metadata
    )
