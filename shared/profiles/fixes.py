"""The fix a profile author is told for a schema error: chosen by the error's type, or by the type of the
``ValueError`` a validator of ``shared.profiles.schema`` raised, with a note for the fields whose bound has a
reason. Never by the message text."""

from collections.abc import Mapping
from typing import Any

from shared.models import ExecutorKind
from shared.profile_problems import loc
from shared.profiles.schema import BlockSizeNeedsLastN, UnknownTimezone

_FIX_BY_TYPE: Mapping[str, str] = {
    "missing": "add the field",
    "extra_forbidden": "remove the field or correct its spelling (see the models in shared/profiles/schema.py)",
    "string_pattern_mismatch": "use lower-case letters, digits, '_', '-' or '.', starting with a letter or digit",
}
_FIX_BY_RAISED: Mapping[type, str] = {
    UnknownTimezone: "use an IANA timezone name such as 'Asia/Shanghai'",
    BlockSizeNeedsLastN: "remove block_size, or set mode to 'last_n_user_messages'",
}
_FIX_BY_FIELD: Mapping[str, str] = {"executor": "use one of: " + ", ".join(k.value for k in ExecutorKind)}
_WHY_THE_BOUND: Mapping[str, str] = {
    "history_policy.n": " (20 is the default)",
    "memory_policy.idle_s": " (SQS DelaySeconds cannot exceed 900)",
}
_LOWER_BOUNDS = {"greater_than_equal": "ge", "greater_than": "gt"}
_UPPER_BOUNDS = {"less_than_equal": "le", "less_than": "lt"}
DEFAULT_FIX = "use a value of the type documented in shared/profiles/schema.py"


def fix_for(error: Mapping[str, Any]) -> str:
    """The fix for one error of ``ValidationError.errors()``."""
    kind = error["type"]
    ctx = error.get("ctx") or {}
    field = loc(error["loc"])
    if field in _FIX_BY_FIELD:
        return _FIX_BY_FIELD[field]
    raised: type = type(ctx.get("error"))
    if raised in _FIX_BY_RAISED:
        return _FIX_BY_RAISED[raised]
    if kind in {"enum", "literal_error"}:
        return f"use one of: {ctx.get('expected', 'the documented values')}"
    if kind in _LOWER_BOUNDS:
        return f"use an integer >= {ctx.get(_LOWER_BOUNDS[kind])}{_WHY_THE_BOUND.get(field, '')}"
    if kind in _UPPER_BOUNDS:
        return f"use an integer <= {ctx.get(_UPPER_BOUNDS[kind])}{_WHY_THE_BOUND.get(field, '')}"
    return _FIX_BY_TYPE.get(kind, DEFAULT_FIX)
