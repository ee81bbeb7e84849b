"""The system's tools: the last of the three authorisation layers (``system_allowlist``) is this registry.

A tool is a :class:`ServerTool`: its spec (name, description, JSON Schema of its arguments), an async handler, a
timeout and an output cap. Built-in tools live in ``shared/tools``; deployments add their own as plugins
(:mod:`shared.tools.plugins`) without touching this package; MCP servers add theirs per run
(:mod:`shared.tools.mcp`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from shared.errors import ConfigurationError
from shared.llm.types import ToolSpec

DEFAULT_TOOL_TIMEOUT_S = 10.0
DEFAULT_MAX_OUTPUT_CHARS = 16_000
MCP_PREFIX = "mcp__"
"""Names under this prefix belong to MCP servers (``mcp__<server>__<tool>``); no other tool may take one."""


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a tool may know about the run that calls it."""

    tenant_id: str
    user_id: str
    thread_id: str
    run_id: str


class ToolFailed(Exception):
    """A tool could not do its job; the message is fed back to the model as the tool's error result."""


ToolHandler = Callable[[dict[str, Any], ToolContext], Awaitable[str]]


@dataclass(frozen=True, slots=True)
class ServerTool:
    """A tool the server runs. Arguments are checked against ``spec.parameters`` before ``handler`` is called."""

    spec: ToolSpec
    handler: ToolHandler
    timeout_s: float = DEFAULT_TOOL_TIMEOUT_S
    """Longest the handler may take; past it the model gets a ``tool_timeout`` error result."""
    max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS
    """Longer output is cut to this many characters (and marked), so a tool message fits a store item."""
    source: str = "builtin"
    """Where the tool comes from (``builtin``, ``plugin:<import path>``, ``mcp:<server>``), for errors and audit."""

    @property
    def name(self) -> str:
        return self.spec.name


class ToolRegistry:
    """Tools that exist and that the system allows at all (the ``system_allowlist``)."""

    def __init__(self, tools: Mapping[str, ServerTool] | None = None) -> None:
        self._tools: dict[str, ServerTool] = dict(tools or {})

    def register(self, tool: ServerTool) -> None:
        """Add a tool; a second tool with the same name is a configuration error (caught at start-up)."""
        existing = self._tools.get(tool.name)
        if existing is not None:
            raise ConfigurationError(
                f"tool {tool.name!r} is registered twice (by {existing.source} and by {tool.source}); "
                "tool names must be unique: rename one or remove it from TOOL_PLUGINS",
                code="duplicate_tool",
            )
        self._tools[tool.name] = tool

    def with_tools(self, extra: Iterable[ServerTool]) -> ToolRegistry:
        """A copy with ``extra`` added (the MCP tools of one run); the same duplicate rule applies."""
        copy = ToolRegistry(self._tools)
        for tool in extra:
            copy.register(tool)
        return copy

    def get(self, name: str) -> ServerTool | None:
        return self._tools.get(name)

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self._tools)
