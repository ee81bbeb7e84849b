"""One model turn, streamed: chunks from the model port become AG-UI events as they arrive.

Shared by every executor, so the wire rules live in one place: a text message is closed before a tool call
starts, tool calls are started only once their name is known, arguments are sent whole once the call is
complete, and everything opened is closed when the turn ends (or is interrupted).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from ag_ui.core import (
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
)

from shared.llm.types import ChatRequest, Finished, ReasoningDelta, TextDelta, ToolCallDelta
from shared.models import ToolCall, Usage
from shared.models import new_id as new_id  # re-exported: it lived here, and the memory modules import it from here
from shared.ports.model import ChatModel
from shared.run_events.emitter import RunEmitter
from shared.tracing import genai as tracing


class _PendingCall:
    """A tool call being put together from its streamed fragments."""

    def __init__(self) -> None:
        self.id: str | None = None
        self.name: str | None = None
        self.arguments = ""
        self.started = False


@dataclass
class TurnResult:
    """What one model turn produced: the answer, its tool calls, why it ended and what it cost."""

    message_id: str
    text_parts: list[str] = field(default_factory=list)
    """The answer's deltas as they came; ``text`` joins them (once, when read), so a delta costs the same
    whatever the length of the answer so far."""
    reasoning_chars: int = 0
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = None
    usage: Usage | None = None
    malformed_call_ids: set[str] = field(default_factory=set)
    raw_arguments: dict[str, str] = field(default_factory=dict)
    """The model's own argument text of each call whose arguments were replaced by ``{}`` (malformed or too long),
    by call id: the audit digests and measures what the model sent, not the replacement (policy.md §3.3)."""

    def arguments_as_sent(self, call: ToolCall) -> str:
        """The call's arguments exactly as the model wrote them."""
        return self.raw_arguments.get(call.id, call.arguments)

    @property
    def text(self) -> str:
        if len(self.text_parts) > 1:
            self.text_parts[:] = ["".join(self.text_parts)]
        return self.text_parts[0] if self.text_parts else ""


# Tool arguments longer than this are treated as malformed (answered to the model as invalid arguments): no tool
# of ours takes anything near it, and the message holding them must fit a DynamoDB item.
MAX_ARGUMENT_CHARS = 64_000


def normalise_arguments(raw: str) -> tuple[str, bool]:
    """Arguments as a JSON object string, and whether the model's own text was one.

    Arguments are sent to clients once, whole, at the end of the call: AG-UI requires the deltas to concatenate to
    valid JSON, and a model can emit malformed arguments that cannot be taken back once streamed.
    """
    text = raw.strip() or "{}"
    if len(text) > MAX_ARGUMENT_CHARS:
        return "{}", False
    try:
        value = json.loads(text)
    except ValueError:
        return "{}", False
    if not isinstance(value, dict):
        return "{}", False
    return text, True


class ModelTurn:
    """Streams one model call into events; ``result`` holds what was produced so far (also when interrupted)."""

    def __init__(self, emitter: RunEmitter, *, emit_text: bool = True) -> None:
        self._emitter = emitter
        self._emit_text = emit_text
        self.result = TurnResult(message_id=new_id("msg"))
        self._text_open = False
        self._calls: dict[int, _PendingCall] = {}
        self.first_event_emitted = False
        self.first_event_at: float | None = None  # time.monotonic() of the first content event

    async def run(self, model: ChatModel, request: ChatRequest) -> TurnResult:
        with tracing.chat(request, model.provider) as trace:
            async for chunk in model.stream(request):
                trace.saw()
                if isinstance(chunk, TextDelta):
                    await self._on_text(chunk.text)
                elif isinstance(chunk, ReasoningDelta):
                    self.result.reasoning_chars += len(chunk.text)
                elif isinstance(chunk, ToolCallDelta):
                    await self._on_tool_delta(chunk)
                elif isinstance(chunk, Finished):
                    self.result.finish_reason = chunk.reason
                    self.result.usage = chunk.usage
                    trace.finished(chunk.reason, chunk.usage)
            await self.close()
            trace.answered(self.result)
        return self.result

    def _mark_first(self) -> None:
        if not self.first_event_emitted:
            self.first_event_emitted = True
            self.first_event_at = time.monotonic()

    async def _on_text(self, text: str) -> None:
        if not text:
            return
        self.result.text_parts.append(text)
        if not self._emit_text:
            return
        if any(call.started for call in self._calls.values()):
            # Text after a tool call started: kept in the stored message, not streamed as a second message.
            return
        if not self._text_open:
            # Written with the first delta just below, in one round trip: the first text reaches the client sooner.
            await self._emitter.emit(
                TextMessageStartEvent(message_id=self.result.message_id, role="assistant"), defer=True
            )
            self._text_open = True
            self._mark_first()
        await self._emitter.emit(TextMessageContentEvent(message_id=self.result.message_id, delta=text))

    async def _close_text(self) -> None:
        if self._text_open:
            self._text_open = False
            await self._emitter.emit(TextMessageEndEvent(message_id=self.result.message_id))

    async def _on_tool_delta(self, delta: ToolCallDelta) -> None:
        call = self._calls.setdefault(delta.index, _PendingCall())
        if delta.id and call.id is None:
            call.id = delta.id
        if delta.name and call.name is None:
            call.name = delta.name
        call.arguments += delta.arguments
        if not call.started and call.name is not None:
            if call.id is None:
                call.id = new_id("call")
            await self._close_text()
            await self._emitter.emit(
                ToolCallStartEvent(
                    tool_call_id=call.id, tool_call_name=call.name, parent_message_id=self.result.message_id
                )
            )
            call.started = True
            self._mark_first()

    async def close(self) -> None:
        """Close the open text message and every started tool call; collect the calls in index order."""
        await self._close_text()
        calls: list[ToolCall] = []
        for index in sorted(self._calls):
            call = self._calls[index]
            if call.name is None:
                continue
            if not call.started:
                call.id = call.id or new_id("call")
                await self._emitter.emit(
                    ToolCallStartEvent(
                        tool_call_id=call.id, tool_call_name=call.name, parent_message_id=self.result.message_id
                    )
                )
                call.started = True
            arguments, valid = normalise_arguments(call.arguments)
            if not valid:
                self.result.malformed_call_ids.add(call.id or "")
                self.result.raw_arguments[call.id or ""] = call.arguments
            await self._emitter.emit(ToolCallArgsEvent(tool_call_id=call.id or "", delta=arguments))
            await self._emitter.emit(ToolCallEndEvent(tool_call_id=call.id or ""))
            calls.append(ToolCall(id=call.id or "", name=call.name, arguments=arguments))
        self._calls.clear()
        self.result.tool_calls.extend(calls)
