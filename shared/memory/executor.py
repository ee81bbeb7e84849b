"""The memory executor: reads what is new in a thread and lets the memory model propose memories.

One run (step ``memory``):

1. Read the thread's messages after the extraction cursor (:meth:`MemoryStore.get_cursor`), oldest first. When
   none of them is a user message written by the human, there is nothing to extract: only the cursor moves.
2. Build the model's view: the new messages (user messages whole, marked ``new="true"``; assistant text cut to
   :data:`MAX_SHOWN_OTHER_CHARS`, tool output to :data:`MAX_SHOWN_TOOL_CHARS`), preceded by a small fixed amount
   of context: the :data:`CONTEXT_USER_TURNS` turns before the cursor, each message cut to
   :data:`MAX_CONTEXT_CHARS` (never the whole history window again: a coalesced run already covers every turn
   since the last extraction); memory-injected text omitted; plus the user's ~10 active memories most related to
   the new messages, marked as existing memories with their ids so the model can avoid duplicates and forget or
   supersede them. A user message's images and files appear as one placeholder line each (``[image: name,
   640x480]``, ``[document: name]``): never their bytes, nor a document's text, which is not the user's words.
3. Call the memory profile's model (``qwen3.5-flash``, thinking off) offering exactly ``memory_write`` and
   ``memory_forget``, authorised per call by the same :class:`~shared.tool_gate.ToolGate` as the worker's. Every
   call is a proposal for :class:`~shared.memory.gate.MemoryGate`; its decision (``stored``, ``merged``,
   ``rejected: why`` ...) is fed back as the tool result, and the model may correct itself, for at most
   :data:`MAX_MODEL_TURNS` turns.
4. Only when all of that succeeded, move the cursor to the newest message read. A failed or cancelled run
   leaves it, so a retry sees the same messages again (the gate merges what was already written).

Nothing of a memory run is stored in the thread: its prompt and tool calls are synthetic, and hidden messages
are still part of every later worker's context window. What it did is in the run's own event stream, in its
run record and in the audit trail (one ``memory_decision`` per proposal, one ``tool_decision`` per call, one
``memory_run`` summary).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from ag_ui.core import StepFinishedEvent, StepStartedEvent, ToolCallResultEvent

from shared.attachments.placeholders import with_placeholders
from shared.executors.context import RunContext
from shared.executors.model_turn import ModelTurn, new_id
from shared.llm.types import ChatMessage, ChatRequest
from shared.memory.embeddings import cosine
from shared.memory.gate import GateOutcome, MemoryGate
from shared.memory.grounding import ExtractionScope
from shared.memory.injection import message_is_memory_injection, rank_by_relevance
from shared.memory.models import Memory
from shared.memory.ports import Embedder, MemoryStore
from shared.memory.text import relevance, tokens
from shared.memory.tools import MEMORY_TOOL_SPECS
from shared.message_tree import BranchWalk
from shared.models import AuditRecord, Message, Origin, Role, ToolCall, utc_now
from shared.ports import AuditLog, MessageHistoryReader
from shared.ports.model import ChatModel
from shared.run_events.emitter import RunEmitter
from shared.run_results import ExecutionFailed, ExecutionResult
from shared.tool_gate import GateContext, ToolGate
from shared.tools.registry import ToolRegistry
from shared.tracing.genai import tool_call
from shared.tracing.runs import link_read_messages

logger = logging.getLogger(__name__)

MAX_MODEL_TURNS = 3
MAX_NEW_MESSAGES = 100
"""Unprocessed messages read per run; a longer backlog is taken by the next run (the cursor stops here)."""
RELATED_MEMORIES = 10
MAX_SHOWN_CHARS = 4_000
"""A new user message is shown up to this long (the quote must be in what the model saw)."""
MAX_SHOWN_OTHER_CHARS = 400
"""Assistant and automation text among the new messages: enough to see what the user answered, no more."""
MAX_SHOWN_TOOL_CHARS = 300
CONTEXT_USER_TURNS = 2
"""Turns before the cursor shown as context (already processed: never a source)."""
MAX_CONTEXT_CHARS = 200
MAX_CONTEXT_READ = 20
"""Messages read back for that context (one store request; tool-heavy turns may leave fewer than 2 turns)."""

SYSTEM_PROMPT = """\
You maintain long-term memories about a user for their personal assistant. You read part of a conversation \
and call tools; you never chat.

Call memory_write for each durable fact the user states about themselves in a user message marked \
new="true": identity, work, home, family and relationships, health, stable preferences and habits, ongoing \
goals, standing instructions for the assistant. One fact per call, written in the user's language, third \
person ("User ..." / "用户……"), self-contained.
When the user says an existing memory is wrong or asks you to forget it, call memory_forget with its id. When \
a fact changed (moved, new job), call memory_write with the new fact and supersedes=<old id>.

Never remember:
- anything said by the assistant, a tool or the system, or an assistant suggestion the user did not confirm;
- hypotheticals, questions, jokes, role-play, examples, quotes of other texts;
- temporary states and one-off requests (tired today, wants a summary of this file);
- facts about other people, except the user's own relationships ("has two daughters");
- facts already in <existing_memories> (unless they changed);
- anything with low certainty.

Each call needs confidence (0-1: how sure you are the user stated this as a lasting fact about themselves), \
evidence_quote (the user's words copied exactly from a cited message) and source_message_ids (new user \
messages). If nothing is worth remembering, answer "none" without calling a tool. After tool results, only \
correct a rejected proposal when the rejection shows a mistake you can fix; then answer "done"."""


# A role, not a port: the two store reads the memory executor makes (the store adapters have them).
class ThreadReader(MessageHistoryReader, Protocol):
    async def read_forward(self, tenant_id: str, thread_id: str, *, after_seq: int, limit: int) -> list[Message]: ...


@dataclass
class MemoryExecutionResult(ExecutionResult):
    outcomes: list[GateOutcome] = field(default_factory=list)
    new_messages: int = 0
    cursor_from: int = 0
    cursor_to: int | None = None
    """Where the cursor was moved (None: not moved)."""
    related_memories: int = 0

    def decisions(self) -> dict[str, int]:
        return dict(Counter(o.decision for o in self.outcomes))

    @property
    def memory_rejections(self) -> int:
        return sum(1 for o in self.outcomes if not o.persisted)


def is_human_message(message: Message) -> bool:
    """A user message written by the person: the only kind of message a memory may come from."""
    return message.role is Role.USER and message.meta.origin is Origin.CHAT and not message_is_memory_injection(message)


class MemoryExecutor:
    step_name = "memory"

    def __init__(
        self,
        model: ChatModel,
        messages: ThreadReader,
        memories: MemoryStore,
        audit: AuditLog,
        *,
        confidence_threshold: float,
        tools: ToolRegistry | None = None,
        model_name: str | None = None,
        clock: Callable[[], datetime] = utc_now,
        embedder: Embedder | None = None,
    ) -> None:
        self._model = model
        self._messages = messages
        self._memories = memories
        self._audit = audit
        self._tools = tools or ToolRegistry()
        self._model_name = model_name
        self._clock = clock
        self.gate = MemoryGate(
            memories, audit, confidence_threshold=confidence_threshold, clock=clock, embedder=embedder
        )
        self.last_result: MemoryExecutionResult | None = None
        self._turn: ModelTurn | None = None

    async def execute(self, ctx: RunContext, emitter: RunEmitter) -> MemoryExecutionResult:
        result = MemoryExecutionResult()
        self.last_result = result
        tenant, thread = ctx.identity.tenant_id, ctx.thread_id
        await emitter.emit(StepStartedEvent(step_name=self.step_name))
        try:
            cursor = await self._memories.get_cursor(tenant, thread)
            result.cursor_from = cursor
            new = await self._messages.read_forward(tenant, thread, after_seq=cursor, limit=MAX_NEW_MESSAGES)
            result.new_messages = len(new)
            walk = BranchWalk(None)  # the branch of the newest message: the one the chat run just answered on
            on_branch = [m for m in reversed(new) if walk.take(m)][::-1]
            if any(is_human_message(m) for m in on_branch):
                await self._extract(ctx, emitter, on_branch, result, walk)
            if new:
                await self._memories.advance_cursor(tenant, thread, new[-1].seq)
                result.cursor_to = new[-1].seq
        except asyncio.CancelledError:
            await self._close_turn()
            result.cancelled = True
        except Exception as exc:
            await self._close_turn()
            raise ExecutionFailed(exc, result.usage) from exc
        await self._record_summary(ctx, result)
        await emitter.emit(StepFinishedEvent(step_name=self.step_name))
        return result

    async def _extract(
        self,
        ctx: RunContext,
        emitter: RunEmitter,
        new: list[Message],
        result: MemoryExecutionResult,
        walk: BranchWalk,
    ) -> None:
        """Extract from ``new`` (the new messages of the current branch); ``walk`` goes on back along that branch
        for the context before them, so an abandoned branch's messages are never shown."""
        tenant, user, thread = ctx.identity.tenant_id, ctx.identity.user_id, ctx.thread_id
        context = await self._preceding_context(tenant, thread, new[0].seq, walk)
        shown = sorted({m.id: m for m in [*context, *new]}.values(), key=lambda m: (m.seq, m.id))
        new_ids = frozenset(m.id for m in new)
        link_read_messages(shown)  # the memory run's trace links to the runs that wrote what it reads
        scope = ExtractionScope(tenant, user, thread, ctx.run_id, tuple(shown), new_ids)
        query = "\n".join(m.content for m in new if is_human_message(m))
        related = await self._related(await self._memories.list_memories(tenant, user), query)
        result.related_memories = len(related)
        tool_gate = ToolGate(self._tools, ctx.profile, ctx.declared_tools, executor_tools=MEMORY_TOOL_SPECS)
        gate_ctx = GateContext(tenant, user, thread, ctx.run_id, ctx.request_summary or "memory extraction")
        conversation: list[ChatMessage] = [
            ChatMessage(role="system", content=SYSTEM_PROMPT),
            ChatMessage(role="user", content=render_input(shown, new_ids, related)),
        ]
        model = ctx.profile.model
        for _ in range(MAX_MODEL_TURNS):
            request = ChatRequest(
                model=self._model_name or model.name,
                messages=tuple(conversation),
                tools=tuple(tool_gate.effective_tools()),
                thinking=model.thinking,
                temperature=model.temperature,
                max_tokens=model.max_output_tokens,
            )
            self._turn = ModelTurn(emitter)
            turn_result = await self._turn.run(self._model, request)
            self._turn = None
            result.model_turns += 1
            if turn_result.usage is not None:
                result.usage.append(turn_result.usage)
            if not turn_result.tool_calls:
                return
            conversation.append(
                ChatMessage(
                    role="assistant",
                    content=turn_result.text or None,
                    tool_calls=tuple((c.id, c.name, c.arguments) for c in turn_result.tool_calls),
                )
            )
            for call in turn_result.tool_calls:
                sent = turn_result.arguments_as_sent(call)
                content = await self._propose(call, tool_gate, gate_ctx, scope, result, sent)
                conversation.append(ChatMessage(role="tool", content=content, tool_call_id=call.id))
                await emitter.emit(
                    ToolCallResultEvent(message_id=new_id("msg"), tool_call_id=call.id, content=content, role="tool")
                )
        logger.info("memory extraction reached its turn limit", extra={"run_id": ctx.run_id})

    async def _related(self, memories: list[Memory], query: str) -> list[Memory]:
        """The active memories most related to the new user messages: lexical relevance plus, from the gate's
        embedder, similarity of meaning (so a memory in the other language, or in other words, is found too)."""
        active = [m for m in memories if m.is_active]
        if len(active) <= RELATED_MEMORIES:
            return rank_by_relevance(active, query, limit=RELATED_MEMORIES)
        try:
            vectors = await self.gate.embedder.embed([query, *(m.content for m in active)])
        except Exception:
            logger.warning("embedding failed; related memories ranked lexically")
            return rank_by_relevance(active, query, limit=RELATED_MEMORIES)
        query_tokens = tokens(query)
        scored = sorted(
            zip(active, vectors[1:], strict=True),
            key=lambda mv: (
                cosine(vectors[0], mv[1]) + relevance(query_tokens, mv[0].content),
                mv[0].updated_at.timestamp(),
                mv[0].id,
            ),
            reverse=True,
        )
        return [m for m, _ in scored[:RELATED_MEMORIES]]

    async def _preceding_context(self, tenant: str, thread: str, first_new_seq: int, walk: BranchWalk) -> list[Message]:
        """The last :data:`CONTEXT_USER_TURNS` turns of the branch before the new messages, oldest first."""
        older = await self._messages.read_back(tenant, thread, before_seq=first_new_seq, limit=MAX_CONTEXT_READ)
        kept: list[Message] = []
        turns = 0
        for message in (m for m in older if walk.take(m)):  # newest first
            if turns >= CONTEXT_USER_TURNS:
                break
            kept.append(message)
            if is_human_message(message):
                turns += 1
        return list(reversed(kept))

    async def _close_turn(self) -> None:
        """Close what an interrupted model turn left open (text message, tool calls) on the run's stream."""
        if self._turn is not None:
            turn, self._turn = self._turn, None
            await turn.close()

    async def _propose(
        self,
        call: ToolCall,
        tool_gate: ToolGate,
        gate_ctx: GateContext,
        scope: ExtractionScope,
        result: MemoryExecutionResult,
        arguments_as_sent: str,
    ) -> str:
        result.tool_calls += 1
        with tool_call(call.name, call.id, arguments_as_sent) as traced:
            decision = tool_gate.authorize(call.name, arguments_as_sent, gate_ctx)
            traced.decided(decision)
            await self._audit.record(decision.audit)
            if not decision.allowed:
                result.tool_refusals += 1
                traced.outcome("refused")
                return decision.model_error()
            outcome = await self.gate.review(call.name, call.arguments, scope)
            result.outcomes.append(outcome)
            traced.outcome("executed")
            traced.result(outcome.tool_result())
            return outcome.tool_result()

    async def _record_summary(self, ctx: RunContext, result: MemoryExecutionResult) -> None:
        await self._audit.record(
            AuditRecord(
                kind="memory_run",
                tenant_id=ctx.identity.tenant_id,
                thread_id=ctx.thread_id,
                run_id=ctx.run_id,
                user_id=ctx.identity.user_id,
                at=self._clock(),
                details={
                    "origin": ctx.meta.origin.value,
                    "executor": ctx.meta.executor.value,
                    "execution_profile_name": ctx.meta.execution_profile_name,
                    "hidden_from_user": ctx.meta.hidden_from_user,
                    "new_messages": result.new_messages,
                    "cursor_from": result.cursor_from,
                    "cursor_to": result.cursor_to,
                    "related_memories": result.related_memories,
                    "model_turns": result.model_turns,
                    "proposals": len(result.outcomes),
                    "decisions": result.decisions(),
                    "tool_refusals": result.tool_refusals,
                    "cancelled": result.cancelled,
                },
            )
        )


def render_input(messages: Sequence[Message], new_ids: frozenset[str], memories: Sequence[Memory]) -> str:
    """The user message of the extraction request: existing memories, then the conversation, each marked."""
    lines = ["<existing_memories>"]
    lines += [f'<memory id="{m.id}" kind="{m.kind.value}">{_escape(m.content)}</memory>' for m in memories]
    if not memories:
        lines.append("(none)")
    lines += [
        "</existing_memories>",
        "",
        'Conversation, oldest first. Only user messages with new="true" may be sources.',
        "<conversation>",
    ]
    for message in messages:
        lines.append(_render_message(message, message.id in new_ids))
    lines.append("</conversation>")
    return "\n".join(lines)


def _cut(text: str, limit: int) -> str:
    return text[:limit] + ("…" if len(text) > limit else "")


def _render_message(message: Message, new: bool) -> str:
    """One message as the memory model sees it; a user message's images and files are placeholders, never bytes."""
    role = message.role.value
    if message_is_memory_injection(message):
        body = "(memory-injected text omitted: never a source)"
    elif message.role is Role.TOOL:
        body = f"(tool output, not a source) {_cut(message.content, MAX_SHOWN_TOOL_CHARS if new else 80)}"
    elif message.role is Role.USER and message.meta.origin is Origin.AUTOMATION:
        role = "automation"
        body = _cut(message.content, MAX_SHOWN_OTHER_CHARS if new else MAX_CONTEXT_CHARS)
    elif is_human_message(message):
        body = _cut(message.content, MAX_SHOWN_CHARS if new else MAX_CONTEXT_CHARS)
        body = with_placeholders(body, message.parts)
    else:
        body = _cut(message.content, MAX_SHOWN_OTHER_CHARS if new else MAX_CONTEXT_CHARS)
        if message.role is Role.ASSISTANT and message.tool_calls:
            body += "".join(f" (called {c.name})" for c in message.tool_calls)
    flag = ' new="true"' if new and is_human_message(message) else ""
    return f'<message id="{message.id}" role="{role}"{flag}>{_escape(body)}</message>'


def _escape(text: str) -> str:
    """Keep message text from closing our markup (the quote check ignores the inserted space)."""
    return (
        text.replace("</message", "< /message")
        .replace("</memory", "< /memory")
        .replace("</conversation", "< /conversation")
    )
