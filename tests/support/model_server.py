"""A scripted OpenAI-compatible chat server on loopback, for testing the model adapter over real HTTP.

Tests script the model's turns (``ScriptedTurn``) and the server streams them the way real servers do:
``data: {chat.completion.chunk}`` frames, tool-call deltas by ``index`` with the id and name repeated in every
delta (as llama.cpp does), arguments split into fragments, a ``finish_reason``, a usage-only last chunk with
empty ``choices`` and finally ``data: [DONE]``. It can also fail with an HTTP status, stall, or drop the
connection mid-stream. It runs uvicorn in a background thread with its own event loop, so it works from sync
and async tests alike; ``stop()`` shuts it down and joins the thread.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

DEFAULT_MODELS = ["qwen3.5-35b-a3b", "qwen3.5-flash"]
"""What DashScope publishes for the worker's and the memory executor's models."""


@dataclass
class ScriptedToolCall:
    name: str
    arguments: str
    id: str | None = None  # generated when None


@dataclass
class ScriptedTurn:
    """One scripted model answer, or one scripted failure."""

    text: list[str] = field(default_factory=list)  # streamed content chunks
    tool_calls: list[ScriptedToolCall] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    reasoning_field: str = "reasoning_content"  # vLLM's newer servers say "reasoning"
    usage: tuple[int, int] | None = None  # (prompt, completion); None: estimated roughly from the texts
    cached_tokens: int | None = None  # reported as usage.prompt_tokens_details.cached_tokens when set
    reasoning_tokens: int | None = None  # reported as usage.completion_tokens_details.reasoning_tokens
    # A usage-only last chunk, sent when this is True and the request asked for it
    # (stream_options.include_usage), as OpenAI, DashScope and vLLM do.
    send_usage: bool = True
    chunk_delay_s: float = 0.0  # pause between chunks
    first_chunk_delay_s: float = 0.0  # pause after the headers, before the first chunk
    status: int | None = None  # answer with this HTTP error (JSON error body) instead of a stream
    error_message: str = "scripted failure"
    retry_after_ms: int | None = 10  # keeps the client's retry backoff short in tests; None sends no header
    disconnect_after_chunks: int | None = None  # drop the connection after this many data frames, no [DONE]
    args_chunk_size: int = 7  # tool-call arguments are sent in fragments of this many characters
    omit_tool_call_ids: bool = False  # send tool-call deltas without "id", as some servers do
    finish_reason: str | None = None  # None: "tool_calls" when there are tool calls, else "stop"
    # Sent as they are, each wrapped in the chunk envelope (id, object, created, model), in place of every chunk
    # above: for servers whose chunks are odd (missing or mistyped fields).
    raw_chunks: list[dict[str, Any]] | None = None


@dataclass
class ServedStream:
    """What the server did for one streamed request; times are ``time.monotonic()`` of this process."""

    request_index: int
    frames_sent: int = 0
    first_frame_at: float | None = None
    last_frame_at: float | None = None  # when the server produced its last data frame (before [DONE])
    completed: bool = False  # [DONE] was produced
    disconnected: bool = False  # the scripted disconnect happened


class _ScriptedDisconnect(Exception):
    """Raised inside the body iterator: uvicorn then closes the socket without ending the chunked body."""


def echo_turn(body: dict[str, Any]) -> ScriptedTurn:
    """The default responder: echo the last user message back in a few chunks."""
    last_user = next((m.get("content") for m in reversed(body.get("messages", [])) if m.get("role") == "user"), "")
    words = f"echo: {last_user or ''}".split(" ")
    return ScriptedTurn(text=[w if i == 0 else f" {w}" for i, w in enumerate(words)])


def _rough_tokens(text: str) -> int:
    return max(1, len(text) // 4) if text else 0


class ModelServer:
    """An OpenAI-compatible server for tests. Use as a context manager or call ``start()``/``stop()``."""

    def __init__(
        self,
        responder: Callable[[dict[str, Any]], ScriptedTurn] | None = None,
        models: list[str] | None = None,
        *,
        reject_unknown_models: bool = False,
    ) -> None:
        self.responder = responder or echo_turn
        self.models = list(DEFAULT_MODELS if models is None else models)
        self.reject_unknown_models = reject_unknown_models
        """Answer a chat request for a model not in ``models`` with 404 ``model_not_found``, as hosted APIs do."""
        self._lock = threading.Lock()
        self._queue: deque[ScriptedTurn] = deque()
        self._requests: list[dict[str, Any]] = []
        self._headers: list[dict[str, str]] = []
        self._served: list[ServedStream] = []
        self._ids = itertools.count(1)
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None
        self.base_url = ""

    # -- scripting and observation (thread-safe) -------------------------------------------------------------

    def enqueue(self, *turns: ScriptedTurn) -> None:
        """Queue turns, answered first in first out; when the queue is empty, the responder answers."""
        with self._lock:
            self._queue.extend(turns)

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Every JSON body received on ``/v1/chat/completions``, in order (a copy)."""
        with self._lock:
            return list(self._requests)

    @property
    def request_headers(self) -> list[dict[str, str]]:
        """The headers of each request in ``requests`` (lower-case names), in the same order."""
        with self._lock:
            return list(self._headers)

    @property
    def served(self) -> list[ServedStream]:
        """One record per streamed answer, in order (the records themselves, updated while streaming)."""
        with self._lock:
            return list(self._served)

    # -- lifecycle -------------------------------------------------------------------------------------------

    def start(self) -> str:
        """Start serving on a free loopback port; returns the base URL (``http://127.0.0.1:PORT/v1``)."""
        if self._server is not None:
            return self.base_url
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        config = uvicorn.Config(
            self._app(),
            log_config=None,  # never reconfigure the test process's logging
            log_level="critical",
            access_log=False,
            lifespan="off",
            http="h11",
            loop="asyncio",
            timeout_graceful_shutdown=2,
        )
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="model-server", daemon=True)
        thread.start()
        deadline = time.monotonic() + 10
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                server.should_exit = True
                thread.join(5)
                sock.close()
                raise RuntimeError("model server did not start")
            time.sleep(0.01)
        self._server, self._thread, self._socket = server, thread, sock
        self.base_url = f"http://127.0.0.1:{port}/v1"
        return self.base_url

    def stop(self) -> None:
        """Stop serving and wait for the server thread; open streams are cut after a short grace period."""
        server, thread, sock = self._server, self._thread, self._socket
        self._server = self._thread = self._socket = None
        if server is None or thread is None:
            return
        server.should_exit = True
        thread.join(10)
        if thread.is_alive():
            server.force_exit = True
            thread.join(5)
        if sock is not None:
            sock.close()
        if thread.is_alive():
            raise RuntimeError("model server thread did not stop")

    def __enter__(self) -> ModelServer:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- HTTP ------------------------------------------------------------------------------------------------

    def _app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat_completions, methods=["POST"]),
                Route("/v1/models", self._list_models, methods=["GET"]),
            ]
        )

    async def _list_models(self, request: Request) -> Response:
        created = int(time.time())
        data = [{"id": m, "object": "model", "created": created, "owned_by": "scripted"} for m in self.models]
        return JSONResponse({"object": "list", "data": data})

    async def _chat_completions(self, request: Request) -> Response:
        body: dict[str, Any] = await request.json()
        unknown = self.reject_unknown_models and body.get("model") not in self.models
        with self._lock:
            index = len(self._requests)
            self._requests.append(body)
            self._headers.append(dict(request.headers))
            turn = self._queue.popleft() if self._queue and not unknown else None
        if unknown:
            message = f"The model `{body.get('model')}` does not exist or you do not have access to it."
            return JSONResponse(
                {"error": {"message": message, "type": "invalid_request_error", "code": "model_not_found"}},
                status_code=404,
            )
        if turn is None:
            turn = self.responder(body)
        if turn.status is not None:
            return self._error_response(turn)
        if not body.get("stream"):
            return JSONResponse(self._completion(body, turn))
        served = ServedStream(request_index=index)
        with self._lock:
            self._served.append(served)
        return StreamingResponse(
            self._frames(body, turn, served),
            media_type="text/event-stream",
            headers={"cache-control": "no-cache"},
        )

    @staticmethod
    def _error_response(turn: ScriptedTurn) -> Response:
        status = turn.status or 500
        kind = {400: "invalid_request_error", 401: "authentication_error", 429: "rate_limit_error"}
        error = {"message": turn.error_message, "type": kind.get(status, "server_error"), "code": str(status)}
        headers = {"retry-after-ms": str(turn.retry_after_ms)} if turn.retry_after_ms is not None else {}
        return JSONResponse({"error": error}, status_code=status, headers=headers)

    async def _frames(self, body: dict[str, Any], turn: ScriptedTurn, served: ServedStream) -> AsyncIterator[str]:
        chunks = self._chunks(body, turn)
        if turn.first_chunk_delay_s:
            await asyncio.sleep(turn.first_chunk_delay_s)
        for position, chunk in enumerate(chunks):
            if turn.disconnect_after_chunks is not None and position >= turn.disconnect_after_chunks:
                served.disconnected = True
                raise _ScriptedDisconnect
            if position and turn.chunk_delay_s:
                await asyncio.sleep(turn.chunk_delay_s)
            now = time.monotonic()
            served.first_frame_at = served.first_frame_at or now
            served.last_frame_at = now
            served.frames_sent += 1
            yield f"data: {json.dumps(chunk, separators=(',', ':'))}\n\n"
        served.completed = True
        yield "data: [DONE]\n\n"

    # -- payloads --------------------------------------------------------------------------------------------

    def _envelope(self, body: dict[str, Any], completion_id: str) -> dict[str, Any]:
        return {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": body.get("model", "scripted"),
        }

    def _chunks(self, body: dict[str, Any], turn: ScriptedTurn) -> list[dict[str, Any]]:
        completion_id = f"chatcmpl-{next(self._ids)}"
        if turn.raw_chunks is not None:
            return [{**self._envelope(body, completion_id), **chunk} for chunk in turn.raw_chunks]
        deltas: list[dict[str, Any]] = [{turn.reasoning_field: piece} for piece in turn.reasoning]
        deltas += [{"content": piece} for piece in turn.text]
        for call_index, call in enumerate(self._tool_calls(turn)):
            size = max(1, turn.args_chunk_size)
            fragments = [call.arguments[i : i + size] for i in range(0, len(call.arguments), size)] or [""]
            deltas += [
                {
                    "tool_calls": [
                        {
                            "index": call_index,
                            **({} if turn.omit_tool_call_ids else {"id": call.id}),
                            "type": "function",
                            "function": {"name": call.name, "arguments": fragment},
                        }
                    ]
                }
                for fragment in fragments
            ]
        chunks = []
        for position, delta in enumerate(deltas):
            if position == 0:
                delta = {"role": "assistant", **delta}
            choice = {"index": 0, "delta": delta, "finish_reason": None}
            chunks.append({**self._envelope(body, completion_id), "choices": [choice]})
        final = {"index": 0, "delta": {} if deltas else {"role": "assistant", "content": ""}}
        final["finish_reason"] = self._finish_reason(turn)
        chunks.append({**self._envelope(body, completion_id), "choices": [final]})
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        if turn.send_usage and include_usage:
            chunks.append({**self._envelope(body, completion_id), "choices": [], "usage": self._usage(body, turn)})
        return chunks

    def _completion(self, body: dict[str, Any], turn: ScriptedTurn) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": "".join(turn.text) or None}
        if turn.reasoning:
            message[turn.reasoning_field] = "".join(turn.reasoning)
        calls = self._tool_calls(turn)
        if calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in calls
            ]
        return {
            **self._envelope(body, f"chatcmpl-{next(self._ids)}"),
            "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": self._finish_reason(turn)}],
            "usage": self._usage(body, turn),
        }

    @staticmethod
    def _tool_calls(turn: ScriptedTurn) -> list[ScriptedToolCall]:
        return [ScriptedToolCall(c.name, c.arguments, c.id or f"call_{uuid.uuid4().hex[:12]}") for c in turn.tool_calls]

    @staticmethod
    def _finish_reason(turn: ScriptedTurn) -> str:
        return turn.finish_reason or ("tool_calls" if turn.tool_calls else "stop")

    @staticmethod
    def _usage(body: dict[str, Any], turn: ScriptedTurn) -> dict[str, Any]:
        if turn.usage is not None:
            prompt, completion = turn.usage
        else:
            prompt = _rough_tokens(json.dumps(body.get("messages", [])))
            generated = "".join(turn.text) + "".join(turn.reasoning)
            generated += "".join(c.name + c.arguments for c in turn.tool_calls)
            completion = _rough_tokens(generated)
        usage: dict[str, Any] = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
        if turn.cached_tokens is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": turn.cached_tokens}
        if turn.reasoning_tokens is not None:
            usage["completion_tokens_details"] = {"reasoning_tokens": turn.reasoning_tokens}
        return usage


@pytest.fixture(name="model_server")
def model_server_fixture() -> Iterator[ModelServer]:
    """A started ``ModelServer``, stopped after the test (import ``model_server_fixture`` to use it)."""
    with ModelServer() as server:
        yield server
