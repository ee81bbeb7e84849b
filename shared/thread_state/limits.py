"""How large and how deep a thread's state may be, for a client's state and for a patched one alike.

The state goes to the model in every run of the thread (the run notes) and is stored on one DynamoDB item, so it
is bounded like the tool schemas a client declares: ``MAX_STATE_BYTES`` of compact JSON (UTF-8) and
``MAX_STATE_DEPTH`` levels of nesting.
"""

from __future__ import annotations

import json
from typing import Any

from shared.errors import InvalidRequest

MAX_STATE_BYTES = 16_384
"""Largest state accepted, in bytes of compact JSON (``json.dumps(state, separators=(",", ":"))``, UTF-8)."""
MAX_STATE_DEPTH = 8
"""Deepest nesting accepted (``{}`` is 1, ``{"a": {}}`` is 2)."""


def encoded_state(state: dict[str, Any]) -> str:
    """The state as the store and the run notes hold it: compact JSON, keys in their order."""
    return json.dumps(state, ensure_ascii=False, separators=(",", ":"))


def state_problem(state: Any) -> str | None:
    """Why ``state`` cannot be a thread's state (``None``: it can)."""
    if not isinstance(state, dict):
        return "state must be a JSON object"
    size = len(encoded_state(state).encode())
    if size > MAX_STATE_BYTES:
        return f"state is {size} bytes of JSON; at most {MAX_STATE_BYTES} are accepted"
    if _depth_over(state, MAX_STATE_DEPTH):
        return f"state is nested deeper than {MAX_STATE_DEPTH} levels"
    return None


def _depth_over(value: Any, limit: int) -> bool:
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            if level + 1 > limit:
                return True
            stack.extend((v, level + 1) for v in (item.values() if isinstance(item, dict) else item))
    return False


def check_client_state(state: Any) -> dict[str, Any] | None:
    """``RunAgentInput.state`` as the run takes it: ``None`` when the client sent none (absent, ``null`` or ``{}``),
    else the object, bounded (``422 invalid_state`` / ``state_too_large`` beyond the limits)."""
    if state is None or state == {}:
        return None
    problem = state_problem(state)
    if problem is None:
        assert isinstance(state, dict)
        return state
    details = [{"loc": ["body", "state"], "msg": problem, "type": "value_error"}]
    if not isinstance(state, dict):
        raise InvalidRequest(problem, code="invalid_state", details=details)
    raise InvalidRequest(problem, code="state_too_large", details=details)
