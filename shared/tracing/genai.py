"""The spans of a run's model turns (``chat {model}``) and tool calls (``execute_tool {tool}``), GenAI conventions.

Names are the newest of the OpenTelemetry GenAI semantic conventions (what
``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental`` selects in instrumentation libraries); ours are written
by hand and only in those names. Attributes of our own are under ``agent.``. Every attribute is listed in
docs/observability.md, "Traces".

Content (message text, tool arguments and results) is recorded only with
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``, and even then anything shaped like a credential is
masked (``redacted``).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Protocol

from shared.models import Usage
from shared.tracing.api import NO_SPAN, Span, error_type, tracer
from shared.tracing.runs import current_run

MCP_PREFIX = "mcp__"
_CREDENTIALS = (
    re.compile(r"(?i)((?:bearer|basic)\s+)[^\s\"',]+"),
    re.compile(r"(?i)((?:api[_-]?key|x-api-key|token|secret|password|authorization)[\"']?\s*[:=]\s*[\"']?)[^\s\"',}]+"),
    re.compile(r"\b(sk-)[A-Za-z0-9_-]{6,}"),
    re.compile(r"\b(eyJ)[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+"),  # a JWT
)


def redacted(text: str) -> str:
    """Content as recorded: anything that looks like a credential (bearer tokens, keys, JWTs) masked."""
    for pattern in _CREDENTIALS:
        text = pattern.sub(lambda m: m.group(1) + "***", text)
    return text


class _Message(Protocol):
    @property
    def role(self) -> str: ...

    @property
    def content(self) -> str | None: ...

    @property
    def tool_calls(self) -> tuple[tuple[str, str, str], ...]: ...

    @property
    def tool_call_id(self) -> str | None: ...


class ChatRequestFacts(Protocol):
    """What the ``chat`` span reads of a request (a ``shared.llm.types.ChatRequest`` has all of it)."""

    @property
    def model(self) -> str: ...

    @property
    def messages(self) -> Sequence[_Message]: ...

    @property
    def temperature(self) -> float | None: ...

    @property
    def max_tokens(self) -> int | None: ...


class _Call(Protocol):
    @property
    def id(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def arguments(self) -> str: ...


class _Answer(Protocol):
    @property
    def text(self) -> str: ...

    @property
    def tool_calls(self) -> Sequence[_Call]: ...


def _message_parts(message: _Message) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    if message.content:
        kind = "tool_call_response" if message.role == "tool" else "text"
        key = "response" if kind == "tool_call_response" else "content"
        part: dict[str, Any] = {"type": kind, key: redacted(message.content)}
        if message.tool_call_id:
            part["id"] = message.tool_call_id
        parts.append(part)
    for call_id, name, arguments in message.tool_calls:
        parts.append({"type": "tool_call", "id": call_id, "name": name, "arguments": redacted(arguments)})
    return {"role": message.role, "parts": parts}


class ChatTrace:
    """The span of one model turn; ``saw`` on each chunk (the first one sets the time to first chunk)."""

    def __init__(self, span: Span, *, capture: bool) -> None:
        self.span = span
        self._capture = capture
        self._started = time.monotonic()
        self._first: float | None = None

    def saw(self) -> None:
        if self._first is None:
            self._first = time.monotonic()
            self.span.set("gen_ai.response.time_to_first_chunk", round(self._first - self._started, 6))

    def finished(self, reason: str, usage: Usage | None) -> None:
        self.span.set("gen_ai.response.finish_reasons", [reason])
        if usage is None:
            return
        self.span.set("gen_ai.response.model", usage.provider_model or usage.model)
        self.span.set("gen_ai.usage.input_tokens", usage.input_tokens)
        self.span.set("gen_ai.usage.output_tokens", usage.output_tokens)
        self.span.set("gen_ai.usage.cache_read.input_tokens", usage.cached_input_tokens)
        self.span.set("gen_ai.usage.reasoning.output_tokens", usage.reasoning_tokens)
        self.span.set("agent.usage.estimated", usage.estimated)

    def answered(self, answer: _Answer) -> None:
        """The answer, recorded only when content capture is on (read only then: reading joins its parts)."""
        if not self._capture:
            return
        text, calls = answer.text, answer.tool_calls
        parts: list[dict[str, Any]] = [{"type": "text", "content": redacted(text)}] if text else []
        parts += [{"type": "tool_call", "id": c.id, "name": c.name, "arguments": redacted(c.arguments)} for c in calls]
        self.span.set("gen_ai.output.messages", json.dumps([{"role": "assistant", "parts": parts}]))

    def retried(self, attempt: int, error: str, delay_s: float) -> None:
        self.span.event("gen_ai.client.retry", {"attempt": attempt, "error.type": error, "delay_s": delay_s})


_NO_CHAT = ChatTrace(NO_SPAN, capture=False)
_CHAT: ContextVar[ChatTrace | None] = ContextVar("agent_chat_trace", default=None)


@contextmanager
def chat(request: ChatRequestFacts, provider: str) -> Iterator[ChatTrace]:
    """The ``chat {model}`` span of one model turn (``request.model``: the profile's logical model; the provider's
    id arrives with the usage as ``gen_ai.response.model``)."""
    current = tracer()
    if not current.enabled:
        yield _NO_CHAT
        return
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": provider,
        "gen_ai.request.model": request.model,
        "gen_ai.request.stream": True,
        "gen_ai.request.temperature": request.temperature,
        "gen_ai.request.max_tokens": request.max_tokens,
    }
    if current.capture_content:
        attributes["gen_ai.input.messages"] = json.dumps([_message_parts(m) for m in request.messages])
    trace = ChatTrace(current.start(f"chat {request.model}", attributes), capture=current.capture_content)
    token = _CHAT.set(trace)
    try:
        with current.activate(trace.span):
            yield trace
    except BaseException as exc:
        trace.span.fail(error_type(exc))
        raise
    finally:
        _CHAT.reset(token)
        trace.span.end()


def model_retry(attempt: int, error: str, delay_s: float) -> None:
    """A model request about to be sent again (the adapter's own retries): an event on the turn's span, or on the
    run's when the request was opened ahead of its turn (beside admission)."""
    turn = _CHAT.get()
    if turn is not None:
        turn.retried(attempt, error, delay_s)
    else:
        current_run().span.event("gen_ai.client.retry", {"attempt": attempt, "error.type": error, "delay_s": delay_s})


class _Decision(Protocol):
    @property
    def allowed(self) -> bool: ...

    @property
    def kind(self) -> str | None: ...

    @property
    def layer(self) -> str | None: ...

    @property
    def reason(self) -> str: ...


class ToolTrace:
    """The span of one tool call: the gate's decision, what came of it, and (with capture) the result."""

    def __init__(self, span: Span, name: str, *, capture: bool) -> None:
        self.span = span
        self._name = name
        self._capture = capture

    def decided(self, decision: _Decision) -> None:
        kind = decision.kind
        self.span.set("agent.tool.kind", kind)
        self.span.set("gen_ai.tool.type", "extension" if kind == "mcp" else "function")
        if kind == "mcp" and self._name.startswith(MCP_PREFIX):
            self.span.set("agent.tool.mcp.server", self._name[len(MCP_PREFIX) :].split("__", 1)[0])
        self.span.set("agent.tool.decision", "allowed" if decision.allowed else "refused")
        if not decision.allowed:
            self.span.set("agent.tool.refusal.layer", decision.layer)
            self.span.set("agent.tool.refusal.reason", decision.reason)

    def outcome(self, outcome: str) -> None:
        """``executed``, ``refused``, ``invalid_arguments`` or ``pending_client`` (a front-end call handed over)."""
        self.span.set("agent.tool.outcome", outcome)

    def result(self, content: str) -> None:
        if self._capture:
            self.span.set("gen_ai.tool.call.result", redacted(content))


_NO_TOOL = ToolTrace(NO_SPAN, "", capture=False)


@contextmanager
def tool_call(name: str, call_id: str, arguments: str) -> Iterator[ToolTrace]:
    """The ``execute_tool {tool}`` span of one call, from the gate's decision to the tool's result (a refused call
    has a span too, with no handler time in it)."""
    current = tracer()
    if not current.enabled:
        yield _NO_TOOL
        return
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "gen_ai.tool.call.id": call_id,
    }
    if current.capture_content:
        attributes["gen_ai.tool.call.arguments"] = redacted(arguments)
    trace = ToolTrace(current.start(f"execute_tool {name}", attributes), name, capture=current.capture_content)
    try:
        with current.activate(trace.span):
            yield trace
    except BaseException as exc:
        trace.span.fail(error_type(exc))
        raise
    finally:
        trace.span.end()
