"""The worker executor: intent, tool decisions, tool calls and the answer, in one pass (docs/design.md §4.1).

This module is the loop (model turn, tool step, next turn, until an answer or the bound); the request each turn
sends is built from values in ``shared.executors.request_builder``, the tool calls are answered by
``shared.executors.tool_step``, and what is done beside admission lives in ``shared.executors.head_start``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from ag_ui.core import StepFinishedEvent, StepStartedEvent

from shared.context_window import ReadThrough, resolve_window
from shared.errors import AgentError
from shared.executors import approvals, request_builder
from shared.executors.context import RunContext
from shared.executors.head_start import HeadStart
from shared.executors.images import has_images, image_urls
from shared.executors.model_turn import ModelTurn, TurnResult
from shared.executors.request_builder import MAX_CONTEXT_NOTE_CHARS as MAX_CONTEXT_NOTE_CHARS
from shared.executors.run_state import RunState
from shared.executors.slicing import step_boundary
from shared.executors.tool_step import ToolStep, gate_context, handed_to_client
from shared.llm.types import ChatRequest, ToolSpec
from shared.models import AuditRecord, Identity, Message, Role, ToolCall, utc_now
from shared.ports import AuditLog, ConversationStore, MessageHistoryReader
from shared.ports.attachments import AttachmentStore
from shared.ports.model import ChatModel
from shared.ports.thread_state import ThreadStateStore
from shared.run_events.emitter import RunEmitter
from shared.run_events.tool_results import store_and_emit, synthetic_error
from shared.run_results import INTERRUPTED, ExecutionFailed, ExecutionResult
from shared.thread_state.tool import UPDATE_STATE_SPEC
from shared.tokens import counter_for, message_counter_for
from shared.tool_gate import ToolGate
from shared.tools.registry import ToolRegistry
from shared.tracing.api import span
from shared.tracing.runs import link_read_messages

if TYPE_CHECKING:
    from shared.tools.mcp_servers import McpToolbox

logger = logging.getLogger(__name__)

MAX_MODEL_TURNS = 8


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
        attachments: Callable[[], AttachmentStore] | None = None,
        presigned_images: bool = False,
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
        self._attachments = attachments
        self._presigned_images = presigned_images
        self._tool_step = ToolStep(store, audit)

    def head_start(self, ctx: RunContext) -> HeadStart:
        """A new head start for ``ctx``'s run (shared/executors/head_start.py): the memory note and the thread's
        state to read beside admission, and how to build the first request to send beside its write. Not sent for
        runs whose tools come from MCP servers (listing them is a request of its own, and audited), nor for runs
        that resume (approved calls run before the first turn: its request is not known yet)."""
        state = RunState(self._states, ctx) if self._states is not None else None
        note = None
        memories, query = self._memories, ctx.latest_user_text
        if memories is not None and query:
            note = functools.partial(memories.note, ctx.identity, query, limit=self._memory_limit)
        ahead = not ctx.profile.tool_policy.mcp_servers and not ctx.resume
        return HeadStart(ctx, self._model, note=note, state=state, first_request=self._first_request if ahead else None)

    async def _first_request(self, ctx: RunContext, head: HeadStart) -> ChatRequest | None:
        """The first turn's request as :meth:`execute` will build it; None when it cannot tell yet (no memory
        note read beside admission)."""
        if ctx.known_history is None:
            return None
        result = ExecutionResult()
        note = await head.note_when_read()
        if self._memories is not None:
            if note is None:
                return None
            result.memory_note = note
        if head.state is not None and head.state.known is None:
            return None
        tools = self.gate(ctx).effective_tools()
        return await self._build_request(ctx, head, tools, result, record_repairs=False)

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

    async def execute(self, ctx: RunContext, emitter: RunEmitter) -> ExecutionResult:
        """Run the loop; ``ctx.head_start`` is what was done for this run beside admission (a run started without
        one, e.g. by a test or another executor's caller, gets a new one that has done nothing yet)."""
        head = ctx.head_start if isinstance(ctx.head_start, HeadStart) else self.head_start(ctx)
        try:
            return await self._execute(ctx, head, emitter)
        finally:
            await head.discard()
            if head.state is not None:
                await head.state.settle()

    async def _execute(self, ctx: RunContext, head: HeadStart, emitter: RunEmitter) -> ExecutionResult:
        result = ExecutionResult()
        state = head.state
        if state is not None:
            await state.begin(emitter)
        await emitter.emit(StepStartedEvent(step_name=self.step_name), defer=True)  # sent with the next event
        registry, gate = await self._offer_tools(ctx)
        tools = gate.effective_tools()
        await self._tool_step.resume(ctx, emitter, gate, registry, result, state)
        unanswered: list[ToolCall] = []
        turn: ModelTurn | None = None
        try:
            for _ in range(MAX_MODEL_TURNS):
                if step_boundary(ctx, result, time.time()):  # the slice ended: it goes on (shared.runs.slices)
                    break
                request = await self._build_request(ctx, head, tools, result)
                turn = ModelTurn(emitter)
                try:
                    turn_result = await turn.run(await head.model_for(self._model, request), request)
                finally:
                    if result.first_event_at is None and turn.first_event_at is not None:
                        result.first_event_at = turn.first_event_at
                turn = None
                result.model_turns += 1
                if turn_result.usage is not None:
                    result.usage.append(turn_result.usage)
                handed = handed_to_client(ctx, gate, turn_result)
                held = approvals.held_calls(ctx, gate, turn_result, now=self._clock())
                await self._persist_assistant(ctx, turn_result, flags=approvals.turn_flags(handed, held))
                if not turn_result.tool_calls:
                    break
                unanswered = list(turn_result.tool_calls)
                while unanswered:
                    call = unanswered[0]
                    if call.id in handed:
                        # The client runs it and answers in its next run; the decision is audited like any other.
                        result.tool_calls += 1
                        await self._tool_step.hand_to_client(ctx, gate, call)
                    elif call.id in held:  # not executed: it waits for a person (shared.executors.approvals)
                        await self._tool_step.hold(ctx, gate, call, held[call.id], result)
                    else:
                        await self._tool_step.run(ctx, emitter, gate, registry, turn_result, call, result, state)
                    unanswered.pop(0)
                if handed or held:
                    result.pending_tool_call_ids = [c.id for c in turn_result.tool_calls if c.id in handed]
                    result.interrupts = approvals.interrupts_of(turn_result.tool_calls, held)
                    break
            else:
                raise AgentError("the tool loop reached its limit", code="tool_loop_limit")
        except asyncio.CancelledError as stop:
            # An interrupt (a new message with the ``interrupt`` strategy) names itself in the cancel's message.
            ended_by = "interrupted" if INTERRUPTED in stop.args else "cancelled"
            await self._salvage(ctx, emitter, turn, unanswered, reason="cancelled", ended_by=ended_by)
            result.cancelled = True
        except Exception as exc:
            await self._salvage(ctx, emitter, turn, unanswered, reason="run_failed")
            raise ExecutionFailed(exc, result.usage) from exc
        await emitter.emit(StepFinishedEvent(step_name=self.step_name))
        result.finished_at = time.monotonic()
        return result

    async def _offer_tools(self, ctx: RunContext) -> tuple[ToolRegistry, ToolGate]:
        """The run's tools and their gate; what the gate offers (and withholds) is audited once per run."""
        registry = await self._run_registry(ctx)
        gate = self.gate(ctx, registry)
        for record in gate.offer_audit(gate_context(ctx)):
            await self._audit.record(record)
        return registry, gate

    async def _salvage(
        self,
        ctx: RunContext,
        emitter: RunEmitter,
        turn: ModelTurn | None,
        unanswered: list[ToolCall],
        *,
        reason: str,
        ended_by: str | None = None,
    ) -> None:
        """Leave the thread valid for the next run: close what is open, keep partial text (marked ``ended_by``,
        else ``reason``), and give every tool call without a result a synthetic one (``reason``), persisted, so no
        provider sees a dangling call."""
        calls = list(unanswered)
        if turn is not None:
            await turn.close()
            partial = turn.result
            if partial.text or partial.tool_calls:
                await self._persist_assistant(ctx, partial, flags={"partial": True, "ended_by": ended_by or reason})
                calls.extend(partial.tool_calls)
        for call in calls:
            content = synthetic_error(reason, f"the run ended ({reason}) before this tool ran")
            await store_and_emit(self._store, emitter, ctx, call.id, content, synthetic=True)

    async def _build_request(
        self,
        ctx: RunContext,
        head: HeadStart,
        tools: list[ToolSpec],
        result: ExecutionResult,
        *,
        record_repairs: bool = True,
    ) -> ChatRequest:
        """Read the window (and the memory note beside it, once per run), then build the request from values."""
        now = self._clock()
        prompt = request_builder.system_prompt(ctx, tools, now, self._system_prompt)
        count = counter_for(ctx.profile.model.name)
        base_reserve = request_builder.base_reserve(count, prompt, ctx, tools)

        async def reserve() -> int:
            await self._read_memory_note(ctx, head, result)
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
                leaf_id=ctx.leaf_id if result.model_turns == 0 else None,  # later turns end at the run's newest
            )
            traced.set("agent.window.messages", len(window.messages))
        link_read_messages(window.messages)
        if record_repairs:
            await self._record_repairs(ctx, result, window.repairs)
        state_note = head.state.note() if head.state is not None else ""
        notes = request_builder.run_notes(ctx, result.memory_note, state_note)
        # The store is built on first need (a window with an image), not with the worker: a function that never
        # reads images (the memory function) neither builds it nor reads its settings.
        store = self._attachments() if self._attachments is not None and has_images(window.messages) else None
        images = await image_urls(store, window.messages, presigned=self._presigned_images)
        return request_builder.model_request(ctx, prompt, tools, window.messages, notes, images)

    async def _record_repairs(
        self, ctx: RunContext, result: ExecutionResult, repairs: Sequence[Mapping[str, object]]
    ) -> None:
        for repair in repairs:
            result.window_repairs += 1
            await self._audit_run(ctx, "window_repair", dict(repair))

    def _history_reader(self, ctx: RunContext, result: ExecutionResult) -> MessageHistoryReader:
        """The first window of a chat run is read from what admission read and stored (no store request); later
        turns (after tool calls) read the store."""
        # A resuming run stored the approved calls' results after admission: its first window reads the store.
        if result.model_turns == 0 and ctx.known_history is not None and not ctx.resume:
            return ReadThrough(self._store, ctx.known_history)
        return self._store

    async def _read_memory_note(self, ctx: RunContext, head: HeadStart, result: ExecutionResult) -> None:
        """Once per run: the memories relevant to the message that started it (later turns reuse the note). Read
        beside admission (``HeadStart.read``), else beside the window, in the same round trip."""
        if self._memories is None or result.memory_note is not None:
            return
        note = head.take_note()
        result.memory_note = note if note is not None else await self._memory_note(ctx) or ""

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
