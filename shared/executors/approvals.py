"""Server tools that wait for a person's approval: AG-UI 1.0 interrupts raised, and the approved calls run on resume.

A profile's ``tool_policy.require_approval`` names server, plugin or MCP tools (exact names or ``*`` patterns, as
``frontend_allowlist``). It only narrows: the gate decides first, and a call it refuses is refused as always.

**Raise.** When the model calls such a tool with well-formed arguments, the call is not executed. The worker stores
the assistant message with one approval request per held call in ``flags["approval_interrupts"]`` (interrupt id,
call id, tool, ``expiresAt``, the tool's argument schema), audits each request (``tool_approval_requested``) and
ends the run with ``RUN_FINISHED.outcome = {"type": "interrupt", "interrupts": [...]}``. The thread is released like
after any run: nothing holds a lease or a Lambda environment while the person decides. The stored message is the
only record, so the open interrupts can never drift from the thread (the thread partition in the store).

**Resume.** The next run's ``RunAgentInput.resume`` answers them. Admission checks the answers against the thread and
stores the synthetic results of declined and expired calls (``shared.runs.approvals``); the worker then audits every
decision with the user who made it (``tool_approval_decided``) and, before its first model turn, runs each
``resolved`` call (its edited arguments, if any) through the gate again and executes it, so the model continues in
that run with the result.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from shared.executors.context import ResumeDecision, RunContext
from shared.executors.model_turn import TurnResult
from shared.llm.types import ToolSpec
from shared.models import AuditRecord, Message, Role, ToolCall, digest, new_id
from shared.run_events.tool_results import FRONTEND_CALLS_FLAG
from shared.tool_gate import ToolGate, frontend_allowed
from shared.tools.arguments import argument_errors

APPROVAL_FLAG = "approval_interrupts"
"""Flag on a stored assistant message: the approval requests of its held tool calls (:class:`ApprovalRequest`)."""
REASON = "tool_call"
"""``Interrupt.reason`` of an approval request."""
LOOKBACK = 50
"""Stored messages searched for the call an interrupt id names (one store request, as for front-end calls)."""


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """One held tool call waiting for a person: what the flag stores and the AG-UI ``Interrupt`` shows."""

    interrupt_id: str
    tool_call_id: str
    tool_name: str
    expires_at: datetime
    schema: Mapping[str, Any]
    """The tool's argument schema when the call was held: the ``responseSchema`` an edited payload must meet."""

    def to_flag(self) -> dict[str, Any]:
        return {
            "id": self.interrupt_id,
            "toolCallId": self.tool_call_id,
            "toolName": self.tool_name,
            "expiresAt": self.expires_at.isoformat(),
            "schema": dict(self.schema),
        }

    @classmethod
    def from_flag(cls, data: Mapping[str, Any]) -> ApprovalRequest:
        return cls(
            interrupt_id=str(data["id"]),
            tool_call_id=str(data["toolCallId"]),
            tool_name=str(data["toolName"]),
            expires_at=datetime.fromisoformat(str(data["expiresAt"])),
            schema=dict(data.get("schema") or {}),
        )

    def expired(self, now: datetime) -> bool:
        return now >= self.expires_at

    def interrupt(self, arguments: str) -> dict[str, Any]:
        """The AG-UI 1.0 ``Interrupt`` of this request, as it goes on the wire (camelCase)."""
        try:
            shown: Any = json.loads(arguments)
        except ValueError:
            shown = arguments
        return {
            "id": self.interrupt_id,
            "reason": REASON,
            "message": f"Approve the call of {self.tool_name} with these arguments?",
            "toolCallId": self.tool_call_id,
            "responseSchema": dict(self.schema),
            "expiresAt": self.expires_at.isoformat().replace("+00:00", "Z"),
            "metadata": {"toolName": self.tool_name, "arguments": shown},
        }


def needs_approval(name: str, patterns: Sequence[str]) -> bool:
    """Whether a profile's ``require_approval`` names the tool (exact name or ``*`` pattern)."""
    return bool(patterns) and frontend_allowed(name, patterns)


def held_calls(ctx: RunContext, gate: ToolGate, turn: TurnResult, *, now: datetime) -> dict[str, ApprovalRequest]:
    """The calls of a turn to hold for approval, by call id: allowed server or MCP tools the profile names, with
    arguments that meet the tool's schema (anything else is answered to the model at once, as without approval)."""
    policy = ctx.profile.tool_policy
    if not policy.require_approval:
        return {}
    specs: dict[str, ToolSpec] = {spec.name: spec for spec in gate.effective_tools()}
    held: dict[str, ApprovalRequest] = {}
    for call in turn.tool_calls:
        if gate.kind_of(call.name) not in {"server", "mcp"} or call.id in turn.malformed_call_ids:
            continue
        if not needs_approval(call.name, policy.require_approval):
            continue
        schema = specs[call.name].parameters
        if argument_errors(schema, json.loads(call.arguments)):
            continue
        expires = now + timedelta(seconds=policy.approval_ttl_s)
        held[call.id] = ApprovalRequest(new_id("int"), call.id, call.name, expires, schema)
    return held


def turn_flags(handed: set[str], held: Mapping[str, ApprovalRequest]) -> dict[str, object]:
    """The flags of a turn's assistant message: its calls handed to the client, its calls held for approval."""
    flags: dict[str, object] = {FRONTEND_CALLS_FLAG: sorted(handed)} if handed else {}
    if held:
        flags[APPROVAL_FLAG] = [request.to_flag() for request in held.values()]
    return flags


def interrupts_of(calls: Sequence[ToolCall], held: Mapping[str, ApprovalRequest]) -> list[dict[str, Any]]:
    """The AG-UI interrupts the run ends with: one per held call, in call order."""
    return [held[call.id].interrupt(call.arguments) for call in calls if call.id in held]


class OnRecord(NamedTuple):
    """An approval request as stored: the request, the call it holds and the id of the assistant message with it."""

    request: ApprovalRequest
    call: ToolCall
    message_id: str


def requests_on_record(newest_first: Sequence[Message]) -> dict[str, OnRecord]:
    """Every approval request among the thread's newest messages, by interrupt id, with the call it holds."""
    found: dict[str, OnRecord] = {}
    for msg in newest_first:
        if msg.role is not Role.ASSISTANT or not msg.flags.get(APPROVAL_FLAG):
            continue
        calls = {call.id: call for call in msg.tool_calls}
        for raw in msg.flags[APPROVAL_FLAG]:
            request = ApprovalRequest.from_flag(raw)
            if request.tool_call_id in calls:
                found[request.interrupt_id] = OnRecord(request, calls[request.tool_call_id], msg.id)
    return found


def answered_call_ids(newest_first: Sequence[Message]) -> set[str]:
    return {m.tool_call_id for m in newest_first if m.role is Role.TOOL and m.tool_call_id}


def open_requests(newest_first: Sequence[Message]) -> list[ApprovalRequest]:
    """The approval requests still waiting: those of the thread's newest assistant message with tool calls (no user
    message after it), whose call has no result yet. Expired ones included (the caller decides)."""
    answered = answered_call_ids(newest_first)
    for msg in newest_first:
        if msg.role is Role.USER:
            return []
        if msg.role is Role.ASSISTANT and msg.tool_calls:
            raw = msg.flags.get(APPROVAL_FLAG) or []
            requests = [ApprovalRequest.from_flag(r) for r in raw]
            return [r for r in requests if r.tool_call_id not in answered]
    return []


def approved_call(request: ApprovalRequest, call: ToolCall, decision: ResumeDecision) -> ToolCall:
    """The call to execute for a ``resolved`` decision: the edited arguments when the person sent some."""
    if decision.payload is None:
        return call
    return call.model_copy(update={"arguments": json.dumps(decision.payload, ensure_ascii=False)})


def _approval_audit(
    kind: str, ctx: RunContext, request: ApprovalRequest, call: ToolCall, details: dict[str, object]
) -> AuditRecord:
    """An approval's audit record: the run's ids, the interrupt and its call, then ``details``."""
    return AuditRecord(
        kind=kind,
        tenant_id=ctx.identity.tenant_id,
        thread_id=ctx.thread_id,
        run_id=ctx.run_id,
        user_id=ctx.identity.user_id,
        details={"interrupt_id": request.interrupt_id, "tool_call_id": call.id, "tool_name": call.name, **details},
    )


def requested_audit(ctx: RunContext, request: ApprovalRequest, call: ToolCall) -> AuditRecord:
    return _approval_audit(
        "tool_approval_requested",
        ctx,
        request,
        call,
        {
            "arguments_digest": digest(call.arguments),
            "expires_at": request.expires_at.isoformat(),
            "profile": ctx.profile.name,
            "profile_version": ctx.profile.version,
        },
    )


def decided_audit(
    ctx: RunContext, request: ApprovalRequest, call: ToolCall, decision: ResumeDecision
) -> AuditRecord:
    """The decision, with the user who made it (the caller of the resuming run)."""
    return _approval_audit(
        "tool_approval_decided",
        ctx,
        request,
        call,
        {
            "status": decision.status,
            "decided_by": ctx.identity.user_id,
            "edited": decision.payload is not None,
            "arguments_digest": digest(approved_call(request, call, decision).arguments),
        },
    )
