"""JSON Schema checks for tool arguments and for the schemas clients declare.

``jsonschema`` is imported on first use, not at start-up: a run that calls no tool never pays for it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from shared.errors import InvalidRequest
from shared.llm.types import ToolSpec

MAX_CLIENT_TOOL_SCHEMA_BYTES = 8_192
MAX_CLIENT_TOOL_SCHEMA_DEPTH = 8

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def _validator_class() -> Any:
    from jsonschema import Draft202012Validator

    return Draft202012Validator


@lru_cache(maxsize=512)
def _validator(schema_json: str) -> Any:
    return _validator_class()(json.loads(schema_json))


def argument_errors(schema: dict[str, Any], arguments: dict[str, Any], *, limit: int = 3) -> list[str]:
    """What is wrong with ``arguments`` under ``schema`` (empty: valid); at most ``limit`` messages."""
    validator = _validator(json.dumps(schema, sort_keys=True))
    out: list[str] = []
    for error in validator.iter_errors(arguments):
        where = "/".join(str(p) for p in error.absolute_path) or "(arguments)"
        out.append(f"{where}: {error.message}"[:300])
        if len(out) >= limit:
            break
    return out


def schema_problem(schema: Any) -> str | None:
    """Why ``schema`` is not a valid JSON Schema (draft 2020-12), or ``None``."""
    from jsonschema.exceptions import SchemaError

    try:
        _validator_class().check_schema(schema)
    except SchemaError as exc:
        return str(exc.message)[:300]
    return None


def json_depth(value: Any) -> int:
    """Nesting depth of a JSON value (a scalar is 0, ``{}`` is 1)."""
    depth = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            depth = max(depth, level + 1)
            stack.extend((v, level + 1) for v in item.values())
        elif isinstance(item, list):
            depth = max(depth, level + 1)
            stack.extend((v, level + 1) for v in item)
    return depth


def declared_tool_error(index: int, name: str, field: str, problem: str) -> InvalidRequest:
    """The 422 ``invalid_tool`` for the ``index``-th tool a client declared (``RunAgentInput.tools``)."""
    return InvalidRequest(
        f"tool {name!r}: {problem}",
        code="invalid_tool",
        details=[{"loc": ["body", "tools", index, field], "msg": problem, "type": "value_error", "tool": name}],
    )


def check_declared_schemas(tools: Sequence[ToolSpec]) -> tuple[ToolSpec, ...]:
    """The tools a client declared, in its order, once each ``parameters`` is a valid JSON Schema (draft 2020-12) of
    ``type: object``, at most ``MAX_CLIENT_TOOL_SCHEMA_BYTES`` of JSON and ``MAX_CLIENT_TOOL_SCHEMA_DEPTH`` levels;
    else a 422 ``invalid_tool`` naming the first bad one."""
    for index, tool in enumerate(tools):
        schema: Any = tool.parameters
        size = len(json.dumps(schema, ensure_ascii=False).encode())
        if size > MAX_CLIENT_TOOL_SCHEMA_BYTES:
            problem: str | None = f"schema larger than {MAX_CLIENT_TOOL_SCHEMA_BYTES} bytes"
        elif json_depth(schema) > MAX_CLIENT_TOOL_SCHEMA_DEPTH:
            problem = f"schema nested deeper than {MAX_CLIENT_TOOL_SCHEMA_DEPTH}"
        elif not isinstance(schema, dict) or schema.get("type") != "object":
            problem = "parameters must be a JSON Schema with type 'object'"
        else:
            invalid = schema_problem(schema)
            problem = None if invalid is None else f"not a valid JSON Schema: {invalid}"
        if problem is not None:
            raise declared_tool_error(index, tool.name, "parameters", problem)
    return tuple(tools)
