"""Plugin modules for the TOOL_PLUGINS tests: a duplicate of the built-in clock, a list, a factory, bad values."""

from __future__ import annotations

import asyncio
from typing import Any

from shared.llm.types import ToolSpec
from shared.tools.registry import ServerTool, ToolContext

CALLS: list[dict[str, Any]] = []


async def _record(arguments: dict[str, Any], _ctx: ToolContext) -> str:
    CALLS.append(arguments)
    return "ok"


async def _slow(_arguments: dict[str, Any], _ctx: ToolContext) -> str:
    await asyncio.sleep(30)
    return "never"


async def _chatty(_arguments: dict[str, Any], _ctx: ToolContext) -> str:
    return "x" * 5_000


def _spec(name: str) -> ToolSpec:
    return ToolSpec(name=name, description=name, parameters={"type": "object", "additionalProperties": False})


CLOCK_AGAIN = ServerTool(spec=_spec("get_current_time"), handler=_record)
PAIR = [ServerTool(spec=_spec("echo_a"), handler=_record), ServerTool(spec=_spec("echo_b"), handler=_record)]
SLOW = ServerTool(spec=_spec("slow_tool"), handler=_slow, timeout_s=0.2)
CHATTY = ServerTool(spec=_spec("chatty_tool"), handler=_chatty, max_output_chars=300)
RESERVED = ServerTool(spec=_spec("mcp__x__y"), handler=_record)
NOT_A_TOOL = 42


def make_pair() -> list[ServerTool]:
    return PAIR
