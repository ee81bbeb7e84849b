"""RFC 6902 JSON Patch over RFC 6901 JSON Pointers, applied to a copy: a patch that fails anywhere changes nothing.

Small and strict on purpose (no dependency carries it): the six operations ``add``, ``remove``, ``replace``,
``move``, ``copy`` and ``test``; array indexes without leading zeros, ``-`` only where a value is added at the end;
``test`` compares as JSON does (``1`` equals ``1.0``, ``true`` is not ``1``, object key order does not matter).
Any fault is a :class:`PatchError` saying which operation failed and why.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from typing import Any

OPERATIONS = ("add", "remove", "replace", "move", "copy", "test")
_INDEX = re.compile(r"^(0|[1-9][0-9]*)$")


class PatchError(ValueError):
    """A patch that cannot be applied; nothing was changed."""


def parse_pointer(pointer: str) -> list[str]:
    """The reference tokens of a JSON Pointer (``""`` is the whole document)."""
    if not isinstance(pointer, str):
        raise PatchError("a path must be a string")
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise PatchError(f"path {pointer!r} must be empty or start with '/'")
    tokens = pointer[1:].split("/")
    for token in tokens:
        if re.search(r"~(?![01])", token):
            raise PatchError(f"path {pointer!r} has a '~' not followed by 0 or 1")
    return [t.replace("~1", "/").replace("~0", "~") for t in tokens]


def _index(container: list[Any], token: str, *, adding: bool) -> int:
    if adding and token == "-":
        return len(container)
    if not _INDEX.match(token):
        raise PatchError(f"{token!r} is not an array index")
    index = int(token)
    if index > len(container) or (index == len(container) and not adding):
        raise PatchError(f"array index {index} is out of range")
    return index


def _resolve(doc: Any, tokens: Sequence[str]) -> Any:
    for token in tokens:
        if isinstance(doc, dict):
            if token not in doc:
                raise PatchError(f"member {token!r} does not exist")
            doc = doc[token]
        elif isinstance(doc, list):
            doc = doc[_index(doc, token, adding=False)]
        else:
            raise PatchError(f"cannot descend into a scalar at {token!r}")
    return doc


def _parent(doc: Any, tokens: Sequence[str]) -> tuple[Any, str]:
    if not tokens:
        raise PatchError("the operation needs a path below the root")
    parent = _resolve(doc, tokens[:-1])
    if not isinstance(parent, dict | list):
        raise PatchError("the parent of the path is not an object or array")
    return parent, tokens[-1]


def _add(doc: Any, tokens: list[str], value: Any) -> Any:
    if not tokens:
        return value
    parent, key = _parent(doc, tokens)
    if isinstance(parent, dict):
        parent[key] = value
    else:
        parent.insert(_index(parent, key, adding=True), value)
    return doc


def _remove(doc: Any, tokens: list[str]) -> tuple[Any, Any]:
    """(the document, the removed value)."""
    parent, key = _parent(doc, tokens)
    if isinstance(parent, dict):
        if key not in parent:
            raise PatchError(f"member {key!r} does not exist")
        return doc, parent.pop(key)
    return doc, parent.pop(_index(parent, key, adding=False))


def json_equal(a: Any, b: Any) -> bool:
    """Equality as JSON means it: numbers by value, booleans apart from numbers, objects without key order."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def _apply_one(doc: Any, op: dict[str, Any]) -> Any:
    kind = op.get("op")
    tokens = parse_pointer(op.get("path"))  # type: ignore[arg-type]
    if kind in ("add", "replace", "test") and "value" not in op:
        raise PatchError(f"{kind} needs a value")
    if kind == "add":
        return _add(doc, tokens, copy.deepcopy(op["value"]))
    if kind == "remove":
        return _remove(doc, tokens)[0]
    if kind == "replace":
        if not tokens:
            return copy.deepcopy(op["value"])
        _resolve(doc, tokens)
        doc, _ = _remove(doc, tokens)
        return _add(doc, tokens, copy.deepcopy(op["value"]))
    if kind == "test":
        if not json_equal(_resolve(doc, tokens), op["value"]):
            raise PatchError(f"test failed at {op.get('path')!r}")
        return doc
    if kind in ("move", "copy"):
        source = parse_pointer(op.get("from"))  # type: ignore[arg-type]
        if kind == "move":
            if tokens[: len(source)] == source and len(tokens) > len(source):
                raise PatchError("cannot move a value into one of its own children")
            doc, value = _remove(doc, source) if source else (doc, _resolve(doc, source))
        else:
            value = copy.deepcopy(_resolve(doc, source))
        return _add(doc, tokens, value)
    raise PatchError(f"unknown operation {kind!r}; use one of {', '.join(OPERATIONS)}")


def apply_patch(document: Any, patch: Sequence[Any]) -> Any:
    """``document`` with ``patch`` applied, as a new value; ``document`` itself is never changed.

    Raises:
        PatchError: an operation is malformed or cannot apply (a missing member, an index out of range, a failed
            ``test``); the message names the operation by its position.
    """
    if not isinstance(patch, list | tuple):
        raise PatchError("a patch must be an array of operations")
    doc = copy.deepcopy(document)
    for position, op in enumerate(patch):
        if not isinstance(op, dict):
            raise PatchError(f"operation {position}: must be an object")
        try:
            doc = _apply_one(doc, op)
        except PatchError as exc:
            raise PatchError(f"operation {position} ({op.get('op')!r} {op.get('path')!r}): {exc}") from None
    return doc
