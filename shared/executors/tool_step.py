"""The worker's tool step: each tool call of a model turn authorized, audited, run (or handed to the client) and
answered on the stream and in the thread (the shape of openai-agents-python's ``run_internal/tool_execution``).

The gate decides (``shared.tool_gate``: declared ∩ profile allowlist ∩ system); every decision is audited, a refused
call is answered to the model as a tool error, and a front-end call with well-formed arguments goes to the client,
which answers it in its next run. A call the profile holds for a person's approval is not run: it is audited and
waits for the next run's ``resume`` (``shared.executors.approvals``), which :meth:`ToolStep.resume` carries out.
"""

from __future__ import annotations

import json

from ag_ui.core import ToolCallEndEvent, ToolCallStartEvent

from shared.executors import approvals
from shared.executors.context import RunContext
from shared.executors.model_turn import TurnResult
from shared.executors.run_state import RunState
from shared.models import ToolCall
from shared.ports import AuditLog, ConversationStore
from shared.run_events.emitter import RunEmitter
from shared.run_events.tool_results import store_and_emit
from shared.run_results import ExecutionResult
from shared.thread_state.tool import UPDATE_STATE
from shared.tool_gate import GateContext, ToolGate
from shared.tools.arguments import argument_errors
from shared.tools.registry import ToolContext, ToolRegistry
from shared.tools.runner import run_tool, tool_error
from shared.tracing.genai import tool_call


def gate_context(ctx: RunContext) -> GateContext:
    """Who and what a gate decision is about, for its audit record."""
    return GateContext(
        tenant_id=ctx.identity.tenant_id,
        user_id=ctx.identity.user_id,
        thread_id=ctx.thread_id,
        run_id=ctx.run_id,
        summary=ctx.request_summary,
    )


def handed_to_client(ctx: RunContext, gate: ToolGate, turn: TurnResult) -> set[str]:
    """The calls of this turn that go to the client: offered front-end tools with well-formed arguments that match
    the client's own schema (anything else is answered here, as for a server tool)."""
    specs = {spec.name: spec for spec in ctx.client_tools}
    handed: set[str] = set()
    for call in turn.tool_calls:
        if gate.kind_of(call.name) != "frontend" or call.id in turn.malformed_call_ids:
            continue
        if argument_errors(specs[call.name].parameters, json.loads(call.arguments)):
            continue
        handed.add(call.id)
    return handed


class ToolStep:
    """Answers the tool calls of a turn; holds only the ports it writes to (nothing of a run)."""

    def __init__(self, store: ConversationStore, audit: AuditLog) -> None:
        self._store = store
        self._audit = audit

    async def hand_to_client(
        self, ctx: RunContext, gate: ToolGate, call: ToolCall, *, outcome: str = "pending_client"
    ) -> None:
        """A call handed to the client (or held for approval): its gate decision is audited and traced like any
        other."""
        with tool_call(call.name, call.id, call.arguments) as traced:
            decision = gate.authorize(call.name, call.arguments, gate_context(ctx))
            traced.decided(decision)
            traced.outcome(outcome)
            await self._audit.record(decision.audit)

    async def hold(
        self, ctx: RunContext, gate: ToolGate, call: ToolCall, request: approvals.ApprovalRequest,
        result: ExecutionResult,
    ) -> None:
        """A call held for approval: its gate decision and the approval request audited, nothing executed."""
        result.tool_calls += 1
        await self.hand_to_client(ctx, gate, call, outcome="pending_approval")
        await self._audit.record(approvals.requested_audit(ctx, request, call))

    async def resume(
        self,
        ctx: RunContext,
        emitter: RunEmitter,
        gate: ToolGate,
        registry: ToolRegistry,
        result: ExecutionResult,
        state: RunState | None,
    ) -> None:
        """A resuming run: every decision audited with its user; each approved call through the gate again (the
        profile may have changed) and executed, before the first model turn (shared.executors.approvals)."""
        if not ctx.resume:
            return
        recent = await self._store.read_back(
            ctx.identity.tenant_id, ctx.thread_id, before_seq=None, limit=approvals.LOOKBACK
        )
        on_record = approvals.requests_on_record(recent)
        for decision in ctx.resume:
            request, call, message_id = on_record[decision.interrupt_id]
            await self._audit.record(approvals.decided_audit(ctx, request, call, decision))
            if decision.status == "resolved":
                approved = approvals.approved_call(request, call, decision)
                # The call was streamed by the interrupted run: named again (no arguments) so that this stream's
                # TOOL_CALL_RESULT answers a call it started (AG-UI); a client that holds it keeps it as it was.
                await emitter.emit(
                    ToolCallStartEvent(tool_call_id=call.id, tool_call_name=call.name, parent_message_id=message_id)
                )
                await emitter.emit(ToolCallEndEvent(tool_call_id=call.id))
                turn = TurnResult(message_id=message_id, tool_calls=[approved])
                await self.run(ctx, emitter, gate, registry, turn, approved, result, state)

    async def run(
        self,
        ctx: RunContext,
        emitter: RunEmitter,
        gate: ToolGate,
        registry: ToolRegistry,
        turn: TurnResult,
        call: ToolCall,
        result: ExecutionResult,
        state: RunState | None,
    ) -> None:
        """Authorize, audit and run one call (or refuse it), then store and emit its result."""
        result.tool_calls += 1
        with tool_call(call.name, call.id, turn.arguments_as_sent(call)) as traced:
            decision = gate.authorize(call.name, turn.arguments_as_sent(call), gate_context(ctx))
            traced.decided(decision)
            await self._audit.record(decision.audit)
            tool = registry.get(decision.canonical_name) if decision.allowed and decision.canonical_name else None
            if decision.allowed and decision.kind == "executor" and call.name == UPDATE_STATE and state:
                content, outcome = await state.update(turn.arguments_as_sent(call), emitter), "executed"
            elif decision.allowed and decision.kind == "frontend":
                # A front-end call whose arguments break the client's schema: the model gets to try again.
                problems = _frontend_problems(ctx, turn, call)
                content, outcome = tool_error("invalid_arguments", problems), "invalid_arguments"
            elif tool is None:
                result.tool_refusals += 1
                content, outcome = decision.model_error(), "refused"
            elif call.id in turn.malformed_call_ids:
                content, outcome = tool_error("invalid_arguments", "arguments were not valid JSON"), "invalid_arguments"
            else:
                where = ToolContext(ctx.identity.tenant_id, ctx.identity.user_id, ctx.thread_id, ctx.run_id)
                content, outcome = await run_tool(tool, call.arguments, where), "executed"
            traced.outcome(outcome)
            traced.result(content)
        await store_and_emit(self._store, emitter, ctx, call.id, content)


def _frontend_problems(ctx: RunContext, turn: TurnResult, call: ToolCall) -> str:
    if call.id in turn.malformed_call_ids:
        return "arguments were not valid JSON"
    specs = {spec.name: spec for spec in ctx.client_tools}
    return "; ".join(argument_errors(specs[call.name].parameters, json.loads(call.arguments)))
