"""The model port over any OpenAI-compatible chat endpoint, with the ``openai`` client.

With ``shared.llm.openai_errors`` (the SDK's errors as ``ModelError`` codes, and which are retried) it is
the only code that imports ``openai``. It turns the SDK's stream into our chunks (``TextDelta``,
``ReasoningDelta``, ``ToolCallDelta``, one ``Finished``).

Retries are this adapter's own (the client is created with ``max_retries=0``), so that a validation error with a
5xx status is not retried: 429, 408/409, other 5xx, timeouts and connection errors are tried again up to
``max_retries`` times with exponential backoff, honouring ``retry-after(-ms)``, and only before the stream starts.
Once a chunk has been yielded nothing is retried: the caller has already shown it, and a second answer would
duplicate text and tokens. Every rejection is logged once, on one line, with the server's explanation truncated
and with anything that looks like a credential removed (``explain_rejection``).

Model ids: requests name the profile's logical model; ``model_ids`` maps it to the id the provider serves
(``MODEL_ID_MAP``, docs/providers.md). ``Usage`` records both.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import openai
from openai import AsyncOpenAI, AsyncStream
from openai.types.chat import ChatCompletion, ChatCompletionToolParam

from shared.errors import ModelError
from shared.llm.openai_errors import RETRY_BASE_S, model_error, retry_delay, retryable
from shared.llm.request_estimate import estimate_request_tokens
from shared.llm.thinking import Provider, ThinkStripper, detect_provider, thinking_extra_body
from shared.llm.types import (
    ChatChunk,
    ChatRequest,
    Finished,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    ToolSpec,
)
from shared.models import Usage
from shared.tokens import estimate_tokens
from shared.tracing.genai import model_retry

logger = logging.getLogger(__name__)


@dataclass
class _ToolCallSeen:
    id: str | None = None
    name: str | None = None


@dataclass
class _StreamState:
    """What has been seen of one streamed answer, for the final ``Finished`` and the usage estimate."""

    finish_reason: str | None = None
    usage: Mapping[str, Any] | None = None
    visible_text: list[str] = field(default_factory=list)
    reasoning_text: list[str] = field(default_factory=list)
    tool_text: list[str] = field(default_factory=list)
    tool_calls: dict[int, _ToolCallSeen] = field(default_factory=dict)


class OpenAIChatModel:
    """``ChatModel`` for an OpenAI-compatible endpoint (DashScope compatible mode, vLLM, SGLang, ...).

    The ``AsyncOpenAI`` client is created on first use (cheap cold starts; tests may inject their own).
    ``provider`` selects the thinking switch (see ``shared.llm.thinking``); by default it is detected from
    ``base_url``.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        provider: Provider | None = None,
        timeout_s: float = 60.0,
        max_retries: int = 2,
        client: AsyncOpenAI | None = None,
        model_ids: Mapping[str, str] | None = None,
        retry_base_s: float = RETRY_BASE_S,
    ) -> None:
        self.base_url = base_url
        self.thinking_provider: Provider = provider or detect_provider(base_url)
        self.provider: str = self.thinking_provider  # the usage label; a plain str as the port declares
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.model_ids: dict[str, str] = dict(model_ids or {})
        self.retry_base_s = retry_base_s
        self._api_key = api_key
        self._client = client
        self._owns_client = client is None

    @property
    def client(self) -> AsyncOpenAI:
        if self._client is None:
            self._client = AsyncOpenAI(
                base_url=self.base_url,
                api_key=self._api_key,
                timeout=self.timeout_s,
                max_retries=0,  # retried here, where a validation error with a 5xx status can be told apart
            )
        return self._client

    def provider_model_id(self, model: str) -> str:
        """The id the provider serves for a profile's logical ``model`` (itself when not mapped)."""
        return self.model_ids.get(model, model)

    async def aclose(self) -> None:
        """Close the HTTP client if this adapter created it."""
        if self._client is not None and self._owns_client:
            await self._client.close()
            self._client = None

    async def list_models(self) -> list[str]:
        """The model ids the endpoint serves.

        Raises:
            ModelError: the endpoint could not be reached or refused the request.
        """
        try:
            return [model.id async for model in self.client.models.list()]
        except openai.OpenAIError as exc:
            raise self._error(exc, streaming=False, model="(list models)") from exc

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatChunk]:
        """Stream one model turn; ends with exactly one ``Finished`` or raises ``ModelError``.

        Tool-call ids and names are passed on once per index even when the server repeats them in every
        delta, so a consumer may concatenate or overwrite; arguments arrive as fragments to concatenate.
        """
        response = await self._open_stream(request)
        state = _StreamState()
        stripper = ThinkStripper()
        try:
            async for chunk in response:
                for item in self._chunk_items(chunk, state, stripper):
                    yield item
        except (openai.OpenAIError, ValueError) as exc:
            # A break after the finish_reason only cost us the usage trailer: the answer is complete.
            if state.finish_reason is None:
                raise self._error(exc, streaming=True, model=request.model) from exc
        finally:
            await response.close()

        if state.finish_reason is None:
            raise ModelError(
                "the model stream ended before the answer was finished",
                code="model_stream_interrupted",
                details={"provider": self.provider, "model": request.model},
            )
        for item in _released(*stripper.flush(), state):
            yield item
        for index, seen in sorted(state.tool_calls.items()):
            if seen.id is None:  # some servers send no ids; the conversation needs one to pair the result
                seen.id = f"call_{uuid.uuid4().hex[:24]}"
                yield ToolCallDelta(index=index, id=seen.id)
        reason = state.finish_reason
        if state.tool_calls and reason == "stop":  # servers that end tool calls with "stop"
            reason = "tool_calls"
        yield Finished(reason=reason, usage=self._usage(request, state))

    def request_body(self, request: ChatRequest) -> dict[str, Any]:
        """The JSON body of the streaming ``POST /chat/completions`` for ``request``: exactly what
        ``chat.completions.create`` sends for the same arguments (a test compares the two on the wire)."""
        body: dict[str, Any] = {
            "messages": [m.to_openai() for m in request.messages],
            "model": self.provider_model_id(request.model),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.max_tokens is not None:
            body["max_tokens"] = request.max_tokens
        if request.tool_choice:
            body["tool_choice"] = {"type": "function", "function": {"name": request.tool_choice}}
        if request.tools:
            body["tools"] = _tool_params(request.tools)
        body.update(thinking_extra_body(self.thinking_provider, enabled=request.thinking == "on"))
        return body

    async def _open_stream(self, request: ChatRequest) -> Any:
        """Send the request; retry transient failures (before any chunk) with backoff; map the final error.

        The body is built here as plain JSON and posted with the client's own ``post``, not through
        ``chat.completions.create``: that method walks every message and tool schema through the SDK's TypedDict
        transform (8 ms of CPU for 20 messages and 3 tools on this machine, against 0.1 ms to encode them), which
        changes nothing in a body that is already JSON. Same HTTP client, headers, authentication, retries and
        errors.

        The stream's chunks come back as their decoded JSON (``AsyncStream[object]``), not as
        ``ChatCompletionChunk`` models: building a model from each chunk (the SDK's ``construct_type``, recursive,
        no validation) took 0.6 ms of CPU per chunk here, more than everything else this adapter does with it, on
        every delta of every answer. The SDK still decodes the server-sent events, raises on an ``error`` event
        and ends on ``[DONE]``; ``_chunk_items`` reads the few fields it needs and ignores what it does not know,
        as the model construction did."""
        body = self.request_body(request)
        attempt = 0
        while True:
            try:
                return await self.client.post(
                    "/chat/completions",
                    body=body,
                    cast_to=ChatCompletion,
                    stream=True,
                    stream_cls=AsyncStream[object],  # each chunk as its decoded JSON (_chunk_items)
                    options={"security": {"bearer_auth": True}},
                )
            except openai.OpenAIError as exc:
                error = self._error(exc, streaming=False, model=request.model)
                if not retryable(exc, error) or attempt >= self.max_retries:
                    raise error from exc
                delay = retry_delay(exc, attempt, self.retry_base_s)
                model_retry(attempt + 1, error.code, delay)
                await asyncio.sleep(delay)
                attempt += 1

    def _error(self, exc: Exception, *, streaming: bool, model: str) -> ModelError:
        error = model_error(exc, streaming=streaming, secrets=(self._api_key,))
        details: dict[str, Any] = error.details
        details.update(provider=self.provider, model=model, provider_model=self.provider_model_id(model))
        if error.code == "model_rejected_request":
            logger.warning(
                "model rejected the request: HTTP %s: %s",
                details.get("status"),
                details.get("explanation", ""),
                extra={k: details.get(k) for k in ("provider", "model", "provider_model", "status", "rejected")},
            )
        return error

    def _chunk_items(self, chunk: object, state: _StreamState, stripper: ThinkStripper) -> Iterable[ChatChunk]:
        """What one decoded chunk adds to the answer. A field of the wrong type counts as absent."""
        if not isinstance(chunk, dict):
            return
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            state.usage = usage
        for choice in _dicts(chunk.get("choices")):
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta")
            if isinstance(delta, dict):
                yield from self._delta_items(delta, state, stripper)
            reason = choice.get("finish_reason")
            if isinstance(reason, str):
                state.finish_reason = reason

    def _delta_items(self, delta: dict[str, Any], state: _StreamState, stripper: ThinkStripper) -> Iterable[ChatChunk]:
        # vLLM renamed reasoning_content to reasoning and some versions send both: take one, never both.
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            state.reasoning_text.append(reasoning)
            yield ReasoningDelta(reasoning)
        content = delta.get("content")
        if isinstance(content, str) and content:
            yield from _released(*stripper.feed(content), state)
        for call in _dicts(delta.get("tool_calls")):
            index = call.get("index")
            if not isinstance(index, int):
                continue
            function = call.get("function")
            call_id = call.get("id")
            item = _tool_call_delta(
                index,
                call_id if isinstance(call_id, str) else None,
                function if isinstance(function, dict) else {},
                state,
            )
            if item is not None:
                yield item

    def _usage(self, request: ChatRequest, state: _StreamState) -> Usage:
        reasoning_estimate = estimate_tokens("".join(state.reasoning_text))
        reported = _reported_usage(state.usage)
        if reported is None:
            return Usage(
                provider=self.provider,
                model=request.model,
                provider_model=self.provider_model_id(request.model),
                input_tokens=estimate_request_tokens(request),
                output_tokens=estimate_tokens(
                    "".join(state.visible_text) + "".join(state.reasoning_text) + "".join(state.tool_text)
                ),
                reasoning_tokens=reasoning_estimate,
                estimated=True,
            )
        input_tokens, output_tokens, reasoning, cached = reported
        return Usage(
            provider=self.provider,
            model=request.model,
            provider_model=self.provider_model_id(request.model),
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            # Reasoning is part of the output tokens; without the server's breakdown we estimate the part.
            reasoning_tokens=reasoning if reasoning is not None else min(reasoning_estimate, output_tokens),
            cached_input_tokens=cached or 0,
        )


def _released(visible: str, hidden: str, state: _StreamState) -> Iterable[ChatChunk]:
    if hidden:
        state.reasoning_text.append(hidden)
        yield ReasoningDelta(hidden)
    if visible:
        state.visible_text.append(visible)
        yield TextDelta(visible)


def _dicts(items: object) -> Iterable[dict[str, Any]]:
    """The objects of a JSON array (nothing when ``items`` is not one)."""
    if isinstance(items, list):
        yield from (item for item in items if isinstance(item, dict))


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _reported_usage(usage: Mapping[str, Any] | None) -> tuple[int, int, int | None, int | None] | None:
    """(input, output, reasoning, cached input) tokens from the server's usage trailer; None when it sent none,
    or none with both counts."""
    if usage is None:
        return None
    input_tokens, output_tokens = _count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens"))
    if input_tokens is None or output_tokens is None:
        return None
    completion = usage.get("completion_tokens_details")
    prompt = usage.get("prompt_tokens_details")
    reasoning = _count(completion.get("reasoning_tokens")) if isinstance(completion, dict) else None
    cached = _count(prompt.get("cached_tokens")) if isinstance(prompt, dict) else None
    return input_tokens, output_tokens, reasoning, cached


def _tool_call_delta(
    index: int, call_id: str | None, function: Mapping[str, Any], state: _StreamState
) -> ToolCallDelta | None:
    seen = state.tool_calls.setdefault(index, _ToolCallSeen())
    new_id = call_id if call_id and seen.id is None else None
    name = function.get("name")
    name = name if isinstance(name, str) else None
    new_name = name if name and seen.name is None else None
    arguments = function.get("arguments")
    arguments = arguments if isinstance(arguments, str) else ""
    seen.id = seen.id or new_id
    seen.name = seen.name or new_name
    if new_name:
        state.tool_text.append(new_name)
    state.tool_text.append(arguments)
    if new_id is None and new_name is None and not arguments:
        return None
    return ToolCallDelta(index=index, id=new_id, name=new_name, arguments=arguments)


def _tool_params(tools: tuple[ToolSpec, ...]) -> list[ChatCompletionToolParam]:
    return [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
        }
        for t in tools
    ]
