"""MCP tool servers: their tools join the system layer as ``mcp__<server>__<tool>``.

The deployment names its servers once, in the ``MCP_SERVERS`` setting (a JSON object, see
:func:`parse_mcp_servers`); a profile opts in with ``tool_policy.mcp_servers`` and, when it has an ``allowlist``,
lists the namespaced tools it allows. Only tools in the server's own ``tools`` allowlist are ever offered.

Per run, :meth:`McpToolbox.tools_for` returns the profile's MCP tools as ordinary
:class:`~shared.tools.registry.ServerTool` objects, so they go through the same gate, argument check, timeout,
output cap and audit as every server tool. Each server's tool list is fetched on first use and cached for
``list_ttl_s``; a server that cannot be reached (or answers with an error, or too slowly) is left out of this
run's offer and reported, and the run goes on without it.

The ``mcp`` SDK (2.x, streamable HTTP transport) is imported on first use only: a deployment without MCP servers
pays nothing for it at cold start. Each list or call opens its own short session and closes it before returning,
so nothing keeps running after a Lambda response ends.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from shared.errors import ConfigurationError
from shared.llm.types import ToolSpec
from shared.tools.registry import MCP_PREFIX, ServerTool, ToolContext, ToolFailed

logger = logging.getLogger(__name__)

_SERVER_NAME = re.compile(r"^[a-z0-9](?:[a-z0-9-]|_(?!_)){0,23}$")
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MAX_TOOLS_PER_SERVER = 64
MAX_LIST_PAGES = 10
MAX_DESCRIPTION_CHARS = 1_000


class McpServerConfig(BaseModel):
    """One MCP server of the ``MCP_SERVERS`` setting."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(pattern=r"^https?://")
    """The streamable HTTP endpoint, e.g. ``https://tools.example.com/mcp``."""
    tools: list[str] = Field(min_length=1, max_length=MAX_TOOLS_PER_SERVER)
    """The server's tools that may be offered, by the server's own names; anything else it lists is ignored."""
    timeout_s: float = Field(default=10.0, gt=0, le=120)
    """For listing tools and for each call."""
    list_ttl_s: float = Field(default=300.0, ge=0)
    """How long a fetched tool list is reused."""
    auth_header: str = "Authorization"
    auth_env: str | None = None
    """Name of an environment variable holding the auth header's value."""
    auth_secret_name: str | None = None
    """Name of a Secrets Manager secret holding the auth header's value (used when ``auth_env`` is not set)."""
    max_output_chars: int = Field(default=16_000, ge=1)

    @field_validator("tools")
    @classmethod
    def _tool_names(cls, value: list[str]) -> list[str]:
        for name in value:
            if not _TOOL_NAME.match(name):
                raise ValueError(f"{name!r} is not a tool name (1-64 letters, digits, '_' or '-')")
        return value


def mcp_tool_name(server: str, tool: str) -> str:
    return f"{MCP_PREFIX}{server}__{tool}"


def parse_mcp_servers(text: str | None) -> dict[str, McpServerConfig]:
    """The ``MCP_SERVERS`` setting: ``{"<server>": {"url": ..., "tools": [...], ...}}``.

    Raises:
        ConfigurationError: naming the server and the field, at start-up.
    """
    if not text or not text.strip():
        return {}
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise ConfigurationError(f"MCP_SERVERS is not valid JSON: {exc}", code="invalid_mcp_servers") from exc
    if not isinstance(raw, dict):
        raise ConfigurationError("MCP_SERVERS must be a JSON object of servers", code="invalid_mcp_servers")
    out: dict[str, McpServerConfig] = {}
    for name, body in raw.items():
        if not _SERVER_NAME.match(name):
            raise ConfigurationError(
                f"MCP_SERVERS: server name {name!r} must be 1-24 lower-case letters, digits, '-' or single '_'",
                code="invalid_mcp_servers",
            )
        try:
            config = McpServerConfig.model_validate(body)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or '(server)'}: {e['msg']}" for e in exc.errors())
            raise ConfigurationError(f"MCP_SERVERS.{name}: {problems}", code="invalid_mcp_servers") from exc
        for tool in config.tools:
            if len(mcp_tool_name(name, tool)) > 64:
                raise ConfigurationError(
                    f"MCP_SERVERS.{name}: {mcp_tool_name(name, tool)!r} is longer than 64 characters",
                    code="invalid_mcp_servers",
                )
        out[name] = config
    return out


HeaderValue = Callable[[McpServerConfig], str | None]


@dataclass(frozen=True)
class Unavailable:
    server: str
    reason: str


@dataclass
class McpOffer:
    tools: list[ServerTool] = field(default_factory=list)
    unavailable: list[Unavailable] = field(default_factory=list)


@dataclass
class _Listing:
    expires_at: float
    specs: list[ToolSpec]


def _text_of(result: Any) -> str:
    parts = [str(getattr(block, "text", "")) for block in result.content if getattr(block, "type", "") == "text"]
    text = "\n".join(p for p in parts if p)
    if not text and result.structured_content is not None:
        text = json.dumps(result.structured_content, ensure_ascii=False, default=str)
    return text


class McpToolbox:
    """The configured MCP servers, with a tool-list cache shared by the runs of one process."""

    def __init__(
        self,
        servers: Mapping[str, McpServerConfig],
        *,
        header_value: HeaderValue = lambda _config: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._servers = dict(servers)
        self._header_value = header_value
        self._clock = clock
        self._listings: dict[str, _Listing] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    @property
    def server_names(self) -> frozenset[str]:
        return frozenset(self._servers)

    def known_tool_names(self) -> frozenset[str]:
        """Every tool name some server may offer (what profiles' allowlists are checked against)."""
        return frozenset(mcp_tool_name(s, t) for s, config in self._servers.items() for t in config.tools)

    async def tools_for(self, servers: Sequence[str]) -> McpOffer:
        """The tools of ``servers`` for one run; unreachable servers are reported, not raised."""
        offer = McpOffer()
        for server in servers:
            config = self._servers.get(server)
            if config is None:
                offer.unavailable.append(Unavailable(server, "not configured"))
                continue
            try:
                specs = await self._specs(server, config)
            except Exception as exc:
                reason = _describe(exc)
                logger.warning(
                    "MCP server unavailable; its tools are left out of this run",
                    extra={"mcp_server": server, "reason": reason},
                )
                offer.unavailable.append(Unavailable(server, reason))
                continue
            offer.tools.extend(self._tool(server, config, spec) for spec in specs)
        return offer

    async def _specs(self, server: str, config: McpServerConfig) -> list[ToolSpec]:
        lock = self._locks.setdefault(server, asyncio.Lock())
        async with lock:
            cached = self._listings.get(server)
            if cached is not None and cached.expires_at > self._clock():
                return cached.specs
            specs = await asyncio.wait_for(self._list(server, config), timeout=config.timeout_s)
            self._listings[server] = _Listing(self._clock() + config.list_ttl_s, specs)
            return specs

    async def _list(self, server: str, config: McpServerConfig) -> list[ToolSpec]:
        allowed = set(config.tools)
        specs: dict[str, ToolSpec] = {}
        async with self._client(config) as client:
            cursor: str | None = None
            for _ in range(MAX_LIST_PAGES):
                page = await client.list_tools(cursor=cursor)
                for tool in page.tools:
                    if tool.name not in allowed or tool.name in specs:
                        continue
                    schema = dict(tool.input_schema or {"type": "object"})
                    if schema.get("type") != "object":
                        logger.warning(
                            "MCP tool skipped: its input schema is not an object",
                            extra={"mcp_server": server, "tool": tool.name},
                        )
                        continue
                    specs[tool.name] = ToolSpec(
                        name=mcp_tool_name(server, tool.name),
                        description=(tool.description or "")[:MAX_DESCRIPTION_CHARS],
                        parameters=schema,
                    )
                cursor = page.next_cursor
                if not cursor:
                    break
        return [specs[name] for name in sorted(specs)]

    def _tool(self, server: str, config: McpServerConfig, spec: ToolSpec) -> ServerTool:
        remote_name = spec.name.removeprefix(mcp_tool_name(server, ""))

        async def handler(arguments: dict[str, Any], _ctx: ToolContext) -> str:
            try:
                async with self._client(config) as client:
                    result = await client.call_tool(remote_name, arguments)
            except Exception as exc:
                logger.warning(
                    "MCP tool call failed", extra={"mcp_server": server, "tool": remote_name, "reason": _describe(exc)}
                )
                raise ToolFailed(f"the tool server {server!r} could not be reached") from exc
            text = _text_of(result)
            if result.is_error:
                raise ToolFailed(text or "the tool reported an error")
            return text

        return ServerTool(
            spec=spec,
            handler=handler,
            timeout_s=config.timeout_s,
            max_output_chars=config.max_output_chars,
            source=f"mcp:{server}",
        )

    @asynccontextmanager
    async def _client(self, config: McpServerConfig) -> AsyncIterator[Any]:
        import httpx2
        from mcp.client.client import Client
        from mcp.client.streamable_http import streamable_http_client

        headers: dict[str, str] = {}
        value = self._header_value(config)
        if value:
            headers[config.auth_header] = value
        http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(config.timeout_s))
        async with http, Client(streamable_http_client(config.url, http_client=http), cache=None) as client:
            yield client


def _describe(exc: BaseException) -> str:
    """A short reason for logs and audit; an exception group is described by its first leaf."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, TimeoutError):
        return "timed out"
    return f"{type(exc).__name__}: {exc}"[:300]
