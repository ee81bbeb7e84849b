"""``get_current_time``: the current time in an IANA timezone."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from shared.llm.types import ToolSpec
from shared.tools.registry import ServerTool, ToolContext, ToolFailed

SPEC = ToolSpec(
    name="get_current_time",
    description="Current date and time in an IANA timezone such as 'Asia/Shanghai' or 'Europe/Paris'.",
    parameters={
        "type": "object",
        "properties": {"timezone": {"type": "string", "description": "IANA timezone name; default UTC"}},
        "additionalProperties": False,
    },
)


def make_clock_tool(now: Callable[[], datetime] = lambda: datetime.now(UTC)) -> ServerTool:
    async def handler(arguments: dict[str, Any], _ctx: ToolContext) -> str:
        name = arguments.get("timezone") or "UTC"
        if not isinstance(name, str) or len(name) > 64:
            raise ToolFailed("timezone must be an IANA timezone name")
        try:
            zone = ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ToolFailed(f"unknown timezone: {name}") from exc
        moment = now().astimezone(zone)
        return json.dumps({"timezone": name, "iso": moment.isoformat(timespec="seconds")})

    return ServerTool(spec=SPEC, handler=handler)
