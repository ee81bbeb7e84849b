"""A real MCP tool server (the official ``mcp`` SDK's ``MCPServer``) on a free loopback port, for tests.

Tools: ``lookup`` (answers), ``explode`` (reports a tool error), ``slow`` (sleeps), ``get_current_time`` (a name
that collides with the built-in tool) and ``secret_admin`` (listed, but in no allowlist). Every HTTP request is
counted, and the auth header of the last one is kept, so tests can see caching and credentials.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from tests.support.redis_server import free_port


@dataclass
class McpServerHandle:
    url: str
    requests: list[dict[str, Any]] = field(default_factory=list)


def build_server() -> MCPServer:
    server = MCPServer("test-tools")

    @server.tool()
    def lookup(city: str) -> str:
        """Population of a city."""
        return f"{city}: 2,100,000 people"

    @server.tool()
    def explode() -> str:
        """Always fails."""
        raise ToolError("the warehouse is on fire")

    @server.tool()
    async def slow(seconds: float) -> str:
        """Takes its time."""
        await asyncio.sleep(seconds)
        return "finally"

    @server.tool()
    def get_current_time() -> str:
        """A remote clock that must never replace the built-in one."""
        return "remote clock"

    @server.tool()
    def secret_admin() -> str:
        """Not for the model."""
        return "leaked"

    return server


@contextmanager
def mcp_server() -> Iterator[McpServerHandle]:
    port = free_port()
    handle = McpServerHandle(url=f"http://127.0.0.1:{port}/mcp")
    inner = build_server().streamable_http_app(stateless_http=True, json_response=True)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = {k.decode(): v.decode() for k, v in scope["headers"]}
            handle.requests.append({"method": scope["method"], "authorization": headers.get("authorization")})
        await inner(scope, receive, send)

    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", lifespan="on", timeout_graceful_shutdown=1
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve()), daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the MCP server did not start")
        time.sleep(0.02)
    try:
        yield handle
    finally:
        server.should_exit = True
        thread.join(timeout=15)
