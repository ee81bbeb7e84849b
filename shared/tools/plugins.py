"""Server tools added by a deployment without editing ``shared/``: the ``TOOL_PLUGINS`` setting.

``TOOL_PLUGINS`` is a comma-separated list of import paths ``package.module:attribute``. The attribute is a
:class:`~shared.tools.registry.ServerTool`, a list or tuple of them, or a function without arguments returning
either. Each tool is registered at start-up next to the built-in ones; a path that cannot be imported, an
attribute of another type, a name that is malformed, reserved (``mcp__``) or already taken stops the start with a
:class:`~shared.errors.ConfigurationError` naming the path. See docs/policy.md "Adding a server tool".
"""

from __future__ import annotations

import dataclasses
import importlib
import re
from collections.abc import Iterable

from shared.errors import ConfigurationError
from shared.tools.arguments import schema_problem
from shared.tools.registry import MCP_PREFIX, ServerTool, ToolRegistry

_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def parse_plugin_paths(value: str | None) -> tuple[str, ...]:
    return tuple(part.strip() for part in (value or "").split(",") if part.strip())


def _fail(path: str, problem: str) -> ConfigurationError:
    return ConfigurationError(f"TOOL_PLUGINS entry {path!r}: {problem}", code="invalid_tool_plugin")


def load_plugin(path: str) -> list[ServerTool]:
    """The tools one ``module:attribute`` path exposes, checked and marked with their source."""
    module_name, sep, attribute = path.partition(":")
    if not sep or not module_name or not attribute:
        raise _fail(path, "use the form 'package.module:attribute'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise _fail(path, f"cannot import {module_name!r} ({exc})") from exc
    try:
        value: object = getattr(module, attribute)
    except AttributeError:
        raise _fail(path, f"module {module_name!r} has no attribute {attribute!r}") from None
    if callable(value) and not isinstance(value, ServerTool):
        value = value()
    items: Iterable[object] = [value]
    if isinstance(value, list | tuple):
        items = value
    tools: list[ServerTool] = []
    for item in items:
        if not isinstance(item, ServerTool):
            raise _fail(path, f"expected a ServerTool (or a list of them), got {type(item).__name__}")
        name = item.name
        if not _TOOL_NAME.match(name):
            raise _fail(path, f"tool name {name!r} must be 1-64 letters, digits, '_' or '-'")
        if name.startswith(MCP_PREFIX):
            raise _fail(path, f"tool name {name!r} uses the prefix {MCP_PREFIX!r}, reserved for MCP servers")
        problem = schema_problem(item.spec.parameters)
        if problem is not None or item.spec.parameters.get("type") != "object":
            raise _fail(path, f"tool {name!r}: parameters must be a JSON Schema of type object ({problem or 'type'})")
        if item.timeout_s <= 0 or item.max_output_chars < 1:
            raise _fail(path, f"tool {name!r}: timeout_s and max_output_chars must be positive")
        tools.append(dataclasses.replace(item, source=f"plugin:{path}"))
    return tools


def register_plugins(registry: ToolRegistry, paths: Iterable[str]) -> None:
    """Register every plugin's tools; a duplicate name (with a built-in or another plugin) fails the start."""
    for path in paths:
        for tool in load_plugin(path):
            registry.register(tool)
