"""The state of a thread as the store keeps it: a JSON object and a version that grows with every write."""

from __future__ import annotations

from typing import Any, NamedTuple


class StoredState(NamedTuple):
    """``state``: the thread's shared state (a JSON object); ``version``: 0 for a thread that never had one, then
    one more on every write (a client's state, or a patch the model applied)."""

    state: dict[str, Any]
    version: int


EMPTY_STATE = StoredState(state={}, version=0)
