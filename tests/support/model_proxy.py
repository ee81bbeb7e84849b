"""A pass-through proxy in front of a real OpenAI-compatible server, for the real-model test tier.

A tiny model never picks a tool by itself, so the proxy adds ``tool_choice`` to the requests a test wants forced;
everything else (the messages, the tools, the stream, the errors) is the real server's, byte for byte. It records
every request body it forwarded and the status the server answered, so a test can check what reached the server
and that the server accepted it. Tests may also ``mutate`` a body before it is forwarded, to reproduce what an
older client sent (a ``"content": null`` tool-call message, say).

Forcing rules (``ForcePolicy``): when the request offers tools and its last message is a user message, the first
offered tool named in ``force`` is forced; otherwise ``tool_choice`` is ``"none"``, so the model's answer after a
tool result is text (a real model would decide that itself; the tiny one would loop). ``max_tokens`` is capped
when the request sets none, which keeps the tiny model's rambling short.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route


@dataclass
class Forwarded:
    """One request as it was forwarded, and what the server answered."""

    body: dict[str, Any]
    status: int | None = None
    error_body: str | None = None
    frames: int = 0


@dataclass
class ForcePolicy:
    force: tuple[str, ...] = ()
    """Tool names to force, first offered wins; empty: never force."""
    times: int | None = None
    """How many requests to force (None: every one that qualifies)."""
    max_tokens: int | None = 64
    """``max_tokens`` for requests that set none (None: leave it)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Keys merged into every body (a test's ``logit_bias``, say)."""


@dataclass
class ModelProxy:
    upstream: str
    """The real server's base URL, ``http://127.0.0.1:PORT/v1``."""
    policy: ForcePolicy = field(default_factory=ForcePolicy)
    mutate: Callable[[dict[str, Any]], None] | None = None
    on_first_frame: Callable[[Forwarded], None] | None = None
    """Called (in the proxy's thread) when a stream's first data frame has been forwarded."""
    base_url: str = ""
    forwarded: list[Forwarded] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: uvicorn.Server | None = None
    _thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------------------------

    def start(self) -> str:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
            ]
        )
        config = uvicorn.Config(
            app, log_config=None, log_level="critical", access_log=False, lifespan="off", http="h11", loop="asyncio"
        )
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="model-proxy", daemon=True)
        thread.start()
        deadline = time.monotonic() + 10
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("model proxy did not start")
            time.sleep(0.01)
        self._server, self._thread = server, thread
        self.base_url = f"http://127.0.0.1:{port}/v1"
        return self.base_url

    def stop(self) -> None:
        if self._server is None or self._thread is None:
            return
        self._server.should_exit = True
        self._thread.join(10)
        self._server = self._thread = None

    def __enter__(self) -> ModelProxy:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- observation -----------------------------------------------------------------------------------------

    def requests(self) -> list[Forwarded]:
        with self._lock:
            return list(self.forwarded)

    def clear(self) -> None:
        with self._lock:
            self.forwarded.clear()

    # -- HTTP ------------------------------------------------------------------------------------------------

    def _prepare(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.mutate is not None:
            self.mutate(body)
        tools = [t.get("function", {}).get("name") for t in body.get("tools") or []]
        messages = body.get("messages") or []
        if tools:
            last_role = messages[-1].get("role") if messages else None
            forced = next((name for name in self.policy.force if name in tools), None)
            with self._lock:
                allowed = self.policy.times is None or self.policy.times > 0
                if forced is not None and last_role == "user" and allowed:
                    body["tool_choice"] = {"type": "function", "function": {"name": forced}}
                    if self.policy.times is not None:
                        self.policy.times -= 1
                else:
                    body["tool_choice"] = "none"
        if self.policy.max_tokens is not None and body.get("max_tokens") is None:
            body["max_tokens"] = self.policy.max_tokens
        body.update(self.policy.extra)
        return body

    async def _models(self, request: Request) -> Response:
        async with httpx.AsyncClient(timeout=30) as client:
            upstream = await client.get(f"{self.upstream}/models")
        return Response(upstream.content, status_code=upstream.status_code, media_type="application/json")

    async def _chat(self, request: Request) -> Response:
        body = self._prepare(json.loads(await request.body()))
        record = Forwarded(body=body)
        with self._lock:
            self.forwarded.append(record)
        client = httpx.AsyncClient(timeout=httpx.Timeout(300, connect=10))
        upstream_request = client.build_request(
            "POST",
            f"{self.upstream}/chat/completions",
            json=body,
            headers={"authorization": request.headers.get("authorization", "")},
        )
        upstream = await client.send(upstream_request, stream=True)
        record.status = upstream.status_code
        if upstream.status_code >= 400:
            content = await upstream.aread()
            await upstream.aclose()
            await client.aclose()
            record.error_body = content.decode("utf-8", "replace")
            return Response(content, status_code=upstream.status_code, media_type="application/json")

        async def relay() -> AsyncIterator[bytes]:
            async for line in upstream.aiter_lines():
                if line.startswith("data:"):
                    record.frames += 1
                    if record.frames == 1 and self.on_first_frame is not None:
                        await asyncio.to_thread(self.on_first_frame, record)
                yield (line + "\n").encode()

        async def close() -> None:
            await upstream.aclose()
            await client.aclose()

        return StreamingResponse(
            relay(),
            status_code=upstream.status_code,
            media_type=upstream.headers.get("content-type", "text/event-stream"),
            background=BackgroundTask(close),
        )
