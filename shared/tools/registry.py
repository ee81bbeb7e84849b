"""The system's tools: the last of the three authorisation layers (``system_allowlist``) is this registry."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from shared.llm.types import ToolSpec


@dataclass(frozen=True)
class ToolContext:
    """What a tool may know about the run that calls it."""

    tenant_id: str
    user_id: str
    thread_id: str
    run_id: str


class ToolFailed(Exception):
    """A tool could not do its job; the message is fed back to the model as the tool's error result."""


ToolHandler = Callable[[dict[str, Any], ToolContext], Awaitable[str]]


@dataclass(frozen=True)
class ServerTool:
    spec: ToolSpec
    handler: ToolHandler

    @property
    def name(self) -> str:
        return self.spec.name


class ToolRegistry:
    """Tools that exist and that the system allows at all (the ``system_allowlist``)."""

    def __init__(self, tools: Mapping[str, ServerTool] | None = None) -> None:
        self._tools: dict[str, ServerTool] = dict(tools or {})

    def register(self, tool: ServerTool) -> None:
        self._tools[tool.name] = tool

    def get(self, name: str) -> ServerTool | None:
        return self._tools.get(name)

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self._tools)
