"""The worker executor: intent, tool decisions, tool calls and the answer, in one pass (docs/design.md §4.1)."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Protocol
from zoneinfo import ZoneInfo

from ag_ui.core import StepFinishedEvent, StepStartedEvent

from shared.context_window import ReadThrough, resolve_window
from shared.errors import AgentError
from shared.executors.context import RunContext
from shared.executors.model_turn import ModelTurn, TurnResult
from shared.executors.opened_turn import OpenedTurn
from shared.executors.run_state import RunState
from shared.executors.transcript import one_leading_system, to_chat_messages, with_run_notes
from shared.intent.prompts import build_system_prompt
from shared.llm.types import ChatMessage, ChatRequest, ToolSpec
from shared.models import AuditRecord, Identity, Message, Role, ToolCall, utc_now
from shared.ports import AuditLog, ConversationStore, MessageHistoryReader
from shared.ports.model import ChatModel
from shared.ports.thread_state import ThreadStateStore
from shared.run_events.emitter import RunEmitter
from shared.run_events.tool_results import FRONTEND_CALLS_FLAG, store_and_emit, synthetic_error
from shared.run_results import ExecutionFailed, ExecutionResult
from shared.thread_state.tool import UPDATE_STATE, UPDATE_STATE_SPEC
from shared.tokens import counter_for, message_counter_for
from shared.tool_gate import GateContext, ToolGate
from shared.tools.arguments import argument_errors
from shared.tools.registry import ToolContext, ToolRegistry
from shared.tools.runner import run_tool, tool_error
from shared.tracing.api import span
from shared.tracing.genai import tool_call
from shared.tracing.runs import link_read_messages

if TYPE_CHECKING:
    from shared.tools.mcp_servers import McpToolbox

logger = logging.getLogger(__name__)

MAX_MODEL_TURNS = 8
MAX_CONTEXT_NOTE_CHARS = 4_000


# A role, not a port: implemented in-process by shared.memory.injection, so the worker stays below memory.
class MemoryReader(Protocol):
    """What the worker needs of memory: the note of the user's active memories most relevant to ``query`` (empty
    when there are none). The memory side renders it, so the worker imports nothing of ``shared.memory``."""

    async def note(self, identity: Identity, query: str, *, limit: int) -> str: ...


class WorkerExecutor:
    step_name = "worker"

    def __init__(
        self,
        model: ChatModel,
        store: ConversationStore,
        audit: AuditLog,
        tools: ToolRegistry,
        *,
        clock: Callable[[], datetime] = utc_now,
        system_prompt: Callable[[RunContext, list[ToolSpec]], str] | None = None,
        memories: MemoryReader | None = None,
        memory_limit: int = 20,
        mcp: McpToolbox | None = None,
        states: ThreadStateStore | None = None,
    ) -> None:
        self._model = model
        self._store = store
        self._audit = audit
        self._tools = tools
        self._clock = clock
        self._system_prompt = system_prompt
        self._memories = memories
        self._memory_limit = memory_limit
        self._mcp = mcp
        self._states = states
        self._state: RunState | None = None
        """The run's shared state (``update_state``, ``STATE_SNAPSHOT``), when the worker has a state store."""
        self._prefetched_note: tuple[str, str] | None = None
        """(run id, note) read by :meth:`prefetch` beside admission."""
        self._prefetched: asyncio.Event | None = None
        """Set when :meth:`prefetch` has ended; None while it has not started."""
        self._opened: OpenedTurn | None = None
        """The first model request, opened by :meth:`preopen` while admission stores the run."""

    async def prefetch(self, ctx: RunContext) -> None:
        """The memory note and the thread's state, read beside admission (they need only the caller, the thread and
        the message): the model request then waits for one round trip less. A failure is logged and the read done
        again in :meth:`execute`; a refused admission leaves them unused."""
        self._prefetched = prefetched = asyncio.Event()
        state = self._run_state(ctx)
        try:
            reads = [self._prefetch_note(ctx), *([state.prefetch()] if state is not None else [])]
            await asyncio.gather(*reads, return_exceptions=True)
        finally:
            prefetched.set()

    async def _prefetch_note(self, ctx: RunContext) -> None:
        try:
            if self._memories is None or not ctx.latest_user_text:
                return
            note = await self._memories.note(ctx.identity, ctx.latest_user_text, limit=self._memory_limit)
            self._prefetched_note = (ctx.run_id, note)
        except Exception:
            logger.warning(
                "memory note not read beside admission; read again", extra={"run_id": ctx.run_id}, exc_info=True
            )

    def _run_state(self, ctx: RunContext) -> RunState | None:
        """This run's state (one per executor instance, as an executor runs one run)."""
        if self._state is None and self._states is not None:
            self._state = RunState(self._states, ctx)
        return self._state

    def preopen(self, ctx: RunContext) -> None:
        """Send the first model request now, while admission stores the run (shared/executors/opened_turn.py):
        ``ctx.known_history`` is the thread as admission is about to leave it. :meth:`execute` takes the stream
        when its own first request is the same. Not for runs whose tools come from MCP servers (listing them is
        a request of its own, and audited)."""
        if self._opened is not None or ctx.known_history is None or ctx.profile.tool_policy.mcp_servers:
            return
        self._opened = OpenedTurn(self._model, self._first_request(ctx))

    async def discard_opened(self) -> None:
        """Close the request :meth:`preopen` sent, if no turn took it (the run was refused, or attached to)."""
        opened, self._opened = self._opened, None
        if opened is not None:
            await opened.discard()

    async def _first_request(self, ctx: RunContext) -> ChatRequest | None:
        """The first turn's request as :meth:`execute` will build it; None when it cannot tell yet (no memory
        note read beside admission)."""
        if self._prefetched is not None:
            await self._prefetched.wait()
        result = ExecutionResult()
        if self._memories is not None:
            prefetched = self._prefetched_note
            if prefetched is None or prefetched[0] != ctx.run_id:
                return None
            result.memory_note = prefetched[1]
        state = self._run_state(ctx)
        if state is not None and state.known is None:
            return None
        return await self._build_request(ctx, self.gate(ctx).effective_tools(), result, record_repairs=False)

    async def _model_for(self, request: ChatRequest) -> ChatModel:
        """The opened stream when it was opened for exactly ``request``, else the model (the opened one closed)."""
        opened, self._opened = self._opened, None
        if opened is None:
            return self._model
        if opened.matches(request):
            return opened
        logger.info("first model request differs from the one opened ahead; sending it again")
        await opened.discard()
        return self._model

    def gate(self, ctx: RunContext, tools: ToolRegistry | None = None) -> ToolGate:
        """``declared ∩ profile allowlist ∩ system``, plus the offered front-end tools: see docs/policy.md."""
        return ToolGate(
            tools or self._tools,
            ctx.profile,
            ctx.declared_tools,
            executor_tools=(UPDATE_STATE_SPEC,) if self._states is not None else (),
            frontend=ctx.client_tools,
        )

    async def _run_registry(self, ctx: RunContext) -> ToolRegistry:
        """The system layer of this run: the registry, plus the tools of the profile's reachable MCP servers."""
        servers = ctx.profile.tool_policy.mcp_servers
        if not servers or self._mcp is None:
            return self._tools
        offer = await self._mcp.tools_for(servers)
        for missing in offer.unavailable:
            await self._audit_run(
                ctx,
                "tool_source_unavailable",
                {
                    "source": f"mcp:{missing.server}",
                    "reason": missing.reason,
                    "effect": "its tools are not offered in this run",
                },
            )
        return self._tools.with_tools(offer.tools)

    async def _audit_run(self, ctx: RunContext, kind: str, details: dict[str, object]) -> None:
        await self._audit.record(
            AuditRecord(
                kind=kind,
                tenant_id=ctx.identity.tenant_id,
                thread_id=ctx.thread_id,
                run_id=ctx.run_id,
                user_id=ctx.identity.user_id,
                details=details,
            )
        )

    def _gate_context(self, ctx: RunContext) -> GateContext:
        return GateContext(
            tenant_id=ctx.identity.tenant_id,
            user_id=ctx.identity.user_id,
            thread_id=ctx.thread_id,
            run_id=ctx.run_id,
            summary=ctx.request_summary,
        )

    async def execute(self, ctx: RunContext, emitter: RunEmitter) -> ExecutionResult:
        try:
            return await self._execute(ctx, emitter)
        finally:
            await self.discard_opened()
            state = self._run_state(ctx)
            if state is not None:
                await state.settle()

    async def _execute(self, ctx: RunContext, emitter: RunEmitter) -> ExecutionResult:
        result = ExecutionResult()
        state = self._run_state(ctx)
        if state is not None:
            await state.begin(emitter)
        # Written with the first event after the model request (one round trip less before it).
        await emitter.emit(StepStartedEvent(step_name=self.step_name), defer=True)
        registry = await self._run_registry(ctx)
        gate = self.gate(ctx, registry)
        for record in gate.offer_audit(self._gate_context(ctx)):
            await self._audit.record(record)
        tools = gate.effective_tools()
        unanswered: list[ToolCall] = []
        turn: ModelTurn | None = None
        try:
            for _ in range(MAX_MODEL_TURNS):
                request = await self._build_request(ctx, tools, result)
                turn = ModelTurn(emitter)
                try:
                    turn_result = await turn.run(await self._model_for(request), request)
                finally:
                    if result.first_event_at is None and turn.first_event_at is not None:
                        result.first_event_at = turn.first_event_at
                turn = None
                result.model_turns += 1
                if turn_result.usage is not None:
                    result.usage.append(turn_result.usage)
                handed = self._handed_to_client(ctx, gate, turn_result)
                await self._persist_assistant(
                    ctx, turn_result, flags={FRONTEND_CALLS_FLAG: sorted(handed)} if handed else None
                )
                if not turn_result.tool_calls:
                    break
                unanswered = list(turn_result.tool_calls)
                while unanswered:
                    call = unanswered[0]
                    if call.id in handed:
                        # The client runs it and answers in its next run; the decision is audited like any other.
                        result.tool_calls += 1
                        await self._audit_client_call(ctx, gate, call)
                    else:
                        await self._run_tool(ctx, emitter, gate, registry, turn_result, call, result)
                    unanswered.pop(0)
                if handed:
                    result.pending_tool_call_ids = [c.id for c in turn_result.tool_calls if c.id in handed]
                    break
            else:
                raise AgentError("the tool loop reached its limit", code="tool_loop_limit")
        except asyncio.CancelledError:
            await self._salvage(ctx, emitter, turn, unanswered, reason="cancelled")
            result.cancelled = True
        except Exception as exc:
            await self._salvage(ctx, emitter, turn, unanswered, reason="run_failed")
            raise ExecutionFailed(exc, result.usage) from exc
        await emitter.emit(StepFinishedEvent(step_name=self.step_name))
        result.finished_at = time.monotonic()
        return result

    async def _audit_client_call(self, ctx: RunContext, gate: ToolGate, call: ToolCall) -> None:
        """A call handed to the client: its gate decision is audited and traced like any other."""
        with tool_call(call.name, call.id, call.arguments) as traced:
            decision = gate.authorize(call.name, call.arguments, self._gate_context(ctx))
            traced.decided(decision)
            traced.outcome("pending_client")
            await self._audit.record(decision.audit)

    async def _salvage(
        self,
        ctx: RunContext,
        emitter: RunEmitter,
        turn: ModelTurn | None,
        unanswered: list[ToolCall],
        *,
        reason: str,
    ) -> None:
        """Leave the thread valid for the next run: close what is open, keep partial text (marked), and give
        every tool call without a result a synthetic one, persisted, so no provider sees a dangling call."""
        calls = list(unanswered)
        if turn is not None:
            await turn.close()
            partial = turn.result
            if partial.text or partial.tool_calls:
                await self._persist_assistant(ctx, partial, flags={"partial": True, "ended_by": reason})
                calls.extend(partial.tool_calls)
        for call in calls:
            content = synthetic_error(reason, f"the run ended ({reason}) before this tool ran")
            await store_and_emit(self._store, emitter, ctx, call.id, content, synthetic=True)

    async def _build_request(
        self, ctx: RunContext, tools: list[ToolSpec], result: ExecutionResult, *, record_repairs: bool = True
    ) -> ChatRequest:
        now = self._clock()
        prompt = (
            self._system_prompt(ctx, tools)
            if self._system_prompt
            else build_system_prompt(
                ctx.profile.intent_variant, tools, now.astimezone(ZoneInfo(ctx.profile.history_policy.timezone))
            )
        )
        count = counter_for(ctx.profile.model.name)
        base_reserve = sum(count(text) for text in (prompt, *ctx.context_notes))
        base_reserve += sum(count(json.dumps(t.parameters)) + count(t.description) for t in tools)

        async def reserve() -> int:
            await self._read_memory_note(ctx, result)
            return base_reserve + count(result.memory_note or "")

        reader = self._history_reader(ctx, result)
        with span("agent.window.read", {"agent.window.from_admission": reader is not self._store}) as traced:
            window = await resolve_window(
                reader,
                ctx.identity.tenant_id,
                ctx.thread_id,
                ctx.profile.history_policy,
                now=now,
                count_tokens=message_counter_for(ctx.profile.model.name),
                reserve_tokens=reserve(),  # the note read beside the window's reads
            )
            traced.set("agent.window.messages", len(window.messages))
        link_read_messages(window.messages)
        memory_note = result.memory_note
        if record_repairs:
            await self._record_repairs(ctx, result, window.repairs)
        notes: list[str] = []
        if memory_note:
            notes.append(memory_note)
        state_note = self._state.note() if self._state is not None else ""
        if state_note:
            notes.append(state_note)
        if ctx.context_notes:
            note = "\n".join(ctx.context_notes)[:MAX_CONTEXT_NOTE_CHARS]
            notes.append(f"Client context (informational):\n{note}")
        # Stable first (system prompt, tool specs, history), what changes per run inside the newest user message:
        # the provider's prefix cache then matches the history (see ``with_run_notes``).
        messages = [ChatMessage(role="system", content=prompt), *to_chat_messages(window.messages)]
        return ChatRequest(
            model=ctx.profile.model.name,
            messages=tuple(one_leading_system(with_run_notes(messages, notes))),
            tools=tuple(tools),
            thinking=ctx.profile.model.thinking,
        )

    async def _record_repairs(
        self, ctx: RunContext, result: ExecutionResult, repairs: Sequence[Mapping[str, object]]
    ) -> None:
        for repair in repairs:
            result.window_repairs += 1
            await self._audit_run(ctx, "window_repair", dict(repair))

    def _history_reader(self, ctx: RunContext, result: ExecutionResult) -> MessageHistoryReader:
        """The first window of a chat run is read from what admission read and stored (no store request); later
        turns (after tool calls) read the store."""
        if result.model_turns == 0 and ctx.known_history is not None:
            return ReadThrough(self._store, ctx.known_history)
        return self._store

    def _note_at_hand(self, ctx: RunContext, result: ExecutionResult) -> bool:
        """Whether the run's memory note needs no read: none is read, it was read (an earlier turn), or it was read
        beside admission (``prefetch``; then it is taken into ``result``)."""
        if self._memories is None or result.memory_note is not None:
            return True
        prefetched, self._prefetched_note = self._prefetched_note, None
        if prefetched is not None and prefetched[0] == ctx.run_id:
            result.memory_note = prefetched[1]
            return True
        return False

    async def _read_memory_note(self, ctx: RunContext, result: ExecutionResult) -> None:
        """Once per run: the memories relevant to the message that started it (later turns reuse the note). Read
        beside admission (``prefetch``), else beside the window, in the same round trip."""
        if not self._note_at_hand(ctx, result):
            result.memory_note = await self._memory_note(ctx) or ""

    async def _memory_note(self, ctx: RunContext) -> str | None:
        """The user's active memories as a marked system note, so the memory executor never re-extracts them."""
        assert self._memories is not None
        query = ctx.latest_user_text
        if not query:  # a run started by tool results only: the thread's newest message
            latest = await self._store.read_back(ctx.identity.tenant_id, ctx.thread_id, before_seq=None, limit=1)
            query = latest[0].content if latest else ""
        return await self._memories.note(ctx.identity, query, limit=self._memory_limit) or None

    async def _persist_assistant(
        self, ctx: RunContext, turn: TurnResult, flags: dict[str, object] | None = None
    ) -> None:
        if not turn.text and not turn.tool_calls:
            return
        await self._store.append_messages(
            ctx.identity,
            ctx.thread_id,
            [
                Message(
                    id=turn.message_id,
                    thread_id=ctx.thread_id,
                    role=Role.ASSISTANT,
                    content=turn.text,
                    tool_calls=tuple(turn.tool_calls),
                    run_id=ctx.run_id,
                    meta=ctx.meta,
                    flags=dict(flags or {}),
                )
            ],
        )

    @staticmethod
    def _handed_to_client(ctx: RunContext, gate: ToolGate, turn: TurnResult) -> set[str]:
        """The calls of this turn that go to the client: offered front-end tools with well-formed arguments that
        match the client's own schema (anything else is answered here, as for a server tool)."""
        specs = {spec.name: spec for spec in ctx.client_tools}
        handed: set[str] = set()
        for call in turn.tool_calls:
            if gate.kind_of(call.name) != "frontend" or call.id in turn.malformed_call_ids:
                continue
            if argument_errors(specs[call.name].parameters, json.loads(call.arguments)):
                continue
            handed.add(call.id)
        return handed

    async def _run_tool(
        self,
        ctx: RunContext,
        emitter: RunEmitter,
        gate: ToolGate,
        registry: ToolRegistry,
        turn: TurnResult,
        call: ToolCall,
        result: ExecutionResult,
    ) -> None:
        result.tool_calls += 1
        call_id = call.id
        with tool_call(call.name, call_id, turn.arguments_as_sent(call)) as traced:
            decision = gate.authorize(call.name, turn.arguments_as_sent(call), self._gate_context(ctx))
            traced.decided(decision)
            await self._audit.record(decision.audit)
            tool = registry.get(decision.canonical_name) if decision.allowed and decision.canonical_name else None
            if decision.allowed and decision.kind == "executor" and call.name == UPDATE_STATE and self._state:
                content, outcome = await self._state.update(turn.arguments_as_sent(call), emitter), "executed"
            elif decision.allowed and decision.kind == "frontend":
                # A front-end call whose arguments break the client's schema: the model gets to try again.
                specs = {spec.name: spec for spec in ctx.client_tools}
                problems = (
                    ["arguments were not valid JSON"]
                    if call_id in turn.malformed_call_ids
                    else argument_errors(specs[call.name].parameters, json.loads(call.arguments))
                )
                content, outcome = tool_error("invalid_arguments", "; ".join(problems)), "invalid_arguments"
            elif tool is None:
                result.tool_refusals += 1
                content, outcome = decision.model_error(), "refused"
            elif call_id in turn.malformed_call_ids:
                content, outcome = tool_error("invalid_arguments", "arguments were not valid JSON"), "invalid_arguments"
            else:
                where = ToolContext(ctx.identity.tenant_id, ctx.identity.user_id, ctx.thread_id, ctx.run_id)
                content, outcome = await run_tool(tool, call.arguments, where), "executed"
            traced.outcome(outcome)
            traced.result(content)
        await store_and_emit(self._store, emitter, ctx, call_id, content)
