"""A new run on a thread with open approval interrupts: ``RunAgentInput.resume`` checked, declined calls answered.

At admission (thread claimed, nothing stored yet), :func:`reconcile_approvals` reads the thread's open interrupts
(``shared.executors.approvals``: they live on the stored assistant message, in the thread's own partition) and:

- **with** ``resume``: every entry must name an open interrupt of this thread and every open, unexpired interrupt
  must be answered, or the run is refused with 422 and nothing stored (``unknown_interrupt``,
  ``interrupt_already_answered``, ``interrupt_expired``, ``interrupts_unanswered``, ``invalid_resume_payload``,
  ``resume_with_new_message``). A ``cancelled`` entry stores the synthetic ``declined`` result of its call; a
  ``resolved`` one stores nothing here: the worker runs the call before its first model turn. Interrupts of
  another thread, user or tenant are never found (admission reads only the caller's thread), so they are unknown.
- **without** ``resume`` (the user wrote a new message instead): every open interrupt is cancelled, with the same
  synthetic result a pending front-end call gets (``cancelled``, ended by ``superseded``), whatever the multitask
  strategy. A client that keeps to AG-UI 1.0's rule (``resume`` answers every open interrupt) never sends this;
  one that does not is treated as if it had sent ``cancelled`` for each (docs/protocols/agent/run-agent-input.md).

An expired interrupt cannot be resolved (``interrupt_expired``); a ``cancelled`` entry for it, a run without
``resume`` or a resume that leaves it out all store its call's synthetic ``approval_expired`` result.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ag_ui.core import RunAgentInput

from shared.errors import InvalidRequest
from shared.executors.approvals import ApprovalRequest, open_requests, requests_on_record
from shared.executors.context import ResumeDecision
from shared.models import ExecutionMeta, Message, Role
from shared.run_events.tool_results import synthetic_error
from shared.tools.arguments import argument_errors

DECLINED = "the user declined this tool call"
EXPIRED = "the approval request for this tool call expired before anyone approved it"
SUPERSEDED = "the user sent a new message instead of answering the approval request"
ENDINGS: dict[str, dict[str, str]] = {
    "declined": {"code": "declined", "message": DECLINED},
    "expired": {"code": "approval_expired", "message": EXPIRED},
    "superseded": {"code": "cancelled", "message": SUPERSEDED},
}
"""The synthetic result of an approval call that does not run, by how it ended (``flags.ended_by``)."""
MAX_RESUME_ENTRIES = 64
MAX_PAYLOAD_CHARS = 64_000
"""As a tool call's arguments (``shared.executors.model_turn.MAX_ARGUMENT_CHARS``): an edited call fits a store item."""


def resume_decisions(run_input: RunAgentInput) -> tuple[ResumeDecision, ...]:
    """``RunAgentInput.resume`` bounded: at most 64 entries, ids of 1-256 characters, a payload that is absent,
    ``null`` or a JSON object (the edited arguments) of at most 64 000 characters."""
    entries = run_input.resume or []
    if len(entries) > MAX_RESUME_ENTRIES:
        raise _refuse(f"resume holds more than {MAX_RESUME_ENTRIES} entries", None, code="invalid_request")
    out: list[ResumeDecision] = []
    for index, entry in enumerate(entries):
        if not 0 < len(entry.interrupt_id) <= 256:
            raise _refuse("interruptId must be 1-256 characters", None, code="invalid_request", index=index)
        payload = entry.payload
        if payload is not None and (
            not isinstance(payload, dict) or len(json.dumps(payload, ensure_ascii=False)) > MAX_PAYLOAD_CHARS
        ):
            raise InvalidRequest(
                "a resume payload is the edited arguments: a JSON object of at most 64 000 characters",
                code="invalid_resume_payload",
                details=[{"loc": ["body", "resume", index, "payload"], "msg": "not an arguments object",
                          "type": "value_error", "interruptId": entry.interrupt_id}],
            )
        out.append(ResumeDecision(entry.interrupt_id, entry.status, payload))
    return tuple(out)


def _refuse(message: str, interrupt_id: str | None, *, code: str, index: int | None = None) -> InvalidRequest:
    loc: list[Any] = ["body", "resume"] if index is None else ["body", "resume", index, "interruptId"]
    return InvalidRequest(
        message,
        code=code,
        details=[{"loc": loc, "msg": message, "type": "value_error", "interruptId": interrupt_id}],
    )


def reconcile_approvals(
    resume: Sequence[ResumeDecision],
    messages: Sequence[Message],
    recent: Sequence[Message],
    *,
    now: datetime,
    thread_id: str,
    run_id: str,
    meta: ExecutionMeta,
) -> list[Message]:
    """The messages to store: ``messages`` (settled front-end results first, then the rest), with the synthetic
    results of declined, expired and superseded approval calls placed after the tool results, before the rest.

    Raises:
        InvalidRequest: a resume the thread's open interrupts refuse (see the module docstring).
    """
    open_now = open_requests(recent)
    if not resume and not open_now:
        return list(messages)
    synthetic = (
        _answers(resume, messages, recent, open_now, now=now)
        if resume
        else [(r, "superseded") for r in open_now]
    )
    results = [_result(r, ended_by, thread_id=thread_id, run_id=run_id, meta=meta) for r, ended_by in synthetic]
    tools = [m for m in messages if m.role is Role.TOOL]
    others = [m for m in messages if m.role is not Role.TOOL]
    return [*tools, *results, *others]


_Synthetic = tuple[ApprovalRequest, str]
"""(request, ended_by: a key of ``ENDINGS``) of a synthetic result to store."""


def _answers(
    resume: Sequence[ResumeDecision],
    messages: Sequence[Message],
    recent: Sequence[Message],
    open_now: list[ApprovalRequest],
    *,
    now: datetime,
) -> list[_Synthetic]:
    by_id = {r.interrupt_id: r for r in open_now}
    on_record = requests_on_record(recent)
    seen: set[str] = set()
    out: list[_Synthetic] = []
    for index, decision in enumerate(resume):
        request = by_id.get(decision.interrupt_id)
        if decision.interrupt_id in seen or (request is None and decision.interrupt_id in on_record):
            raise _refuse(f"interrupt {decision.interrupt_id!r} was already answered", decision.interrupt_id,
                          code="interrupt_already_answered", index=index)
        if request is None:
            raise _refuse(f"no open interrupt {decision.interrupt_id!r} on this thread", decision.interrupt_id,
                          code="unknown_interrupt", index=index)
        seen.add(decision.interrupt_id)
        if request.expired(now):
            if decision.status == "resolved":
                raise _refuse(f"interrupt {request.interrupt_id!r} expired at {request.expires_at.isoformat()}",
                              request.interrupt_id, code="interrupt_expired", index=index)
            out.append((request, "expired"))
        elif decision.status == "cancelled":
            out.append((request, "declined"))
        elif decision.payload is not None:
            problems = argument_errors(dict(request.schema), decision.payload)
            if problems:
                raise InvalidRequest(
                    f"the edited arguments do not meet the tool's schema: {'; '.join(problems)}",
                    code="invalid_resume_payload",
                    details=[{"loc": ["body", "resume", index, "payload"], "msg": p, "type": "value_error",
                              "interruptId": request.interrupt_id} for p in problems],
                )
    if any(m.role is Role.USER for m in messages):
        raise _refuse("a resume carries no new user message; answer the interrupts first", None,
                      code="resume_with_new_message")
    unanswered = [r for r in open_now if r.interrupt_id not in seen]
    live = [r.interrupt_id for r in unanswered if not r.expired(now)]
    if live:
        raise _refuse(f"resume leaves open interrupts unanswered: {', '.join(live)}", live[0],
                      code="interrupts_unanswered")
    out.extend((r, "expired") for r in unanswered)
    return out


def _result(request: ApprovalRequest, ended_by: str, *, thread_id: str, run_id: str, meta: ExecutionMeta) -> Message:
    ending = ENDINGS[ended_by]
    return Message(
        id=f"msg_{ended_by}_{request.tool_call_id}"[:128],
        thread_id=thread_id,
        role=Role.TOOL,
        content=synthetic_error(ending["code"], ending["message"]),
        tool_call_id=request.tool_call_id,
        run_id=run_id,
        meta=meta,
        flags={"synthetic": True, "ended_by": ended_by, "interrupt_id": request.interrupt_id},
    )
