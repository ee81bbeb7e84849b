"""Runs one server tool call: arguments checked against the tool's JSON Schema, the handler under the tool's
timeout, its output cut at the tool's cap. Every outcome is a string for the tool message: the tool's output, or
an error object in the one shape the model and clients see for every tool error::

    {"error": {"code": "invalid_arguments" | "tool_failed" | "tool_timeout", "message": "..."}}
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from shared.tools.arguments import argument_errors
from shared.tools.registry import ServerTool, ToolContext, ToolFailed

logger = logging.getLogger(__name__)

TRUNCATION_MARK = "\n[output truncated: {shown} of {total} characters]"


def tool_error(code: str, message: str) -> str:
    return json.dumps({"error": {"code": code, "message": message}}, ensure_ascii=False)


def cap_output(text: str, limit: int) -> str:
    """``text`` if it fits in ``limit`` characters, else its start and a mark saying how much was cut."""
    if len(text) <= limit:
        return text
    mark = TRUNCATION_MARK.format(shown=limit, total=len(text))
    return text[: max(limit - len(mark), 0)] + mark


async def run_tool(tool: ServerTool, arguments_json: str, ctx: ToolContext) -> str:
    """The tool's answer to one call whose arguments are a JSON object string (see the module docstring)."""
    try:
        arguments: Any = json.loads(arguments_json)
    except ValueError:
        return tool_error("invalid_arguments", "arguments were not valid JSON")
    if not isinstance(arguments, dict):
        return tool_error("invalid_arguments", "arguments must be a JSON object")
    problems = argument_errors(tool.spec.parameters, arguments)
    if problems:
        return tool_error("invalid_arguments", "; ".join(problems))
    try:
        output = await asyncio.wait_for(tool.handler(arguments, ctx), timeout=tool.timeout_s)
    except ToolFailed as exc:
        return tool_error("tool_failed", str(exc)[:1_000])
    except TimeoutError:
        logger.warning("tool timed out", extra={"tool": tool.name, "timeout_s": tool.timeout_s, "run_id": ctx.run_id})
        return tool_error("tool_timeout", f"the tool did not answer within {tool.timeout_s:g} s")
    except Exception:
        # A bug in a tool must not end the run; the model learns the tool failed, the log keeps the details.
        logger.exception("tool crashed", extra={"tool": tool.name, "source": tool.source, "run_id": ctx.run_id})
        return tool_error("tool_failed", "the tool failed")
    if not isinstance(output, str):
        output = json.dumps(output, ensure_ascii=False, default=str)
    return cap_output(output, tool.max_output_chars)
