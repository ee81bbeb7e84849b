"""``update_state``: the built-in tool through which the model changes its thread's shared state.

The worker implements it itself (an executor tool, like the memory executor's tools): it passes the tool gate and
its audit like every tool, and is offered only by a profile whose ``tool_policy.allowlist`` names it. Its argument
is ``{"patch": [RFC 6902 operations]}``. A patch that applies and leaves a state within the limits
(``shared.thread_state.limits``) is stored and sent as ``STATE_DELTA``; any other is answered to the model as a
tool error and changes nothing.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from shared.llm.types import ToolSpec
from shared.thread_state.json_patch import OPERATIONS, PatchError, apply_patch
from shared.thread_state.limits import encoded_state, state_problem

UPDATE_STATE = "update_state"
WORKER_TOOL_NAMES: frozenset[str] = frozenset({UPDATE_STATE})
"""The tools the worker executor implements itself (a profile may allow them; no registry holds them)."""
MAX_PATCH_OPERATIONS = 64

UPDATE_STATE_SPEC = ToolSpec(
    name=UPDATE_STATE,
    description=(
        "Change the shared state of this conversation (shown in the run notes) with an RFC 6902 JSON Patch. "
        "Paths are JSON Pointers into the state object, e.g. /steps/0/status. Use a test operation to guard a change."
    ),
    parameters={
        "type": "object",
        "properties": {
            "patch": {
                "type": "array",
                "minItems": 1,
                "maxItems": MAX_PATCH_OPERATIONS,
                "items": {
                    "type": "object",
                    "properties": {
                        "op": {"type": "string", "enum": list(OPERATIONS)},
                        "path": {"type": "string"},
                        "from": {"type": "string"},
                        "value": {},
                    },
                    "required": ["op", "path"],
                },
            }
        },
        "required": ["patch"],
        "additionalProperties": False,
    },
)


class StateUpdate(NamedTuple):
    """A patch that applies: the state after it, and the operations as the model sent them (the ``STATE_DELTA``)."""

    state: dict[str, Any]
    patch: list[dict[str, Any]]


def state_update(current: dict[str, Any], arguments: dict[str, Any]) -> StateUpdate:
    """The state ``arguments["patch"]`` makes of ``current`` (which is left as it was).

    Raises:
        PatchError: the patch does not apply (a bad pointer, a failed ``test``, a malformed operation), or the
            state it leaves is not an object or is over the limits.
    """
    patch = arguments.get("patch")
    if not isinstance(patch, list):
        raise PatchError("patch must be an array of operations")
    updated = apply_patch(current, patch)
    problem = state_problem(updated)
    if problem is not None:
        raise PatchError(f"the patched {problem}")
    return StateUpdate(state=updated, patch=patch)


def state_note(state: dict[str, Any]) -> str:
    """The state as the model reads it in the run notes (nothing for an empty state)."""
    if not state:
        return ""
    return f"Shared state of this conversation (JSON; change it only with {UPDATE_STATE}):\n{encoded_state(state)}"


def applied_result(update: StateUpdate, version: int) -> str:
    """The tool result of an applied patch: the version stored and the whole state after it."""
    return json.dumps({"applied": len(update.patch), "version": version, "state": update.state}, ensure_ascii=False)
