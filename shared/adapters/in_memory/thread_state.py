"""In-memory fake of :class:`~shared.ports.thread_state.ThreadStateStore` (unit tests, ``make dev`` without AWS).

Answers as the DynamoDB adapter does, errors included: tests/contract/test_thread_state_contract.py runs both.
"""

from __future__ import annotations

import copy
from typing import Any

from shared.errors import Conflict, NotFound
from shared.models import Identity
from shared.thread_state.models import StoredState


class InMemoryThreadStates:
    def __init__(self) -> None:
        self._states: dict[tuple[str, str], tuple[str, StoredState]] = {}
        self.reads = 0
        self.writes = 0

    async def read(self, identity: Identity, thread_id: str) -> StoredState | None:
        self.reads += 1
        held = self._states.get((identity.tenant_id, thread_id))
        if held is None or held[0] != identity.user_id:
            return None
        return StoredState(copy.deepcopy(held[1].state), held[1].version)

    async def write(
        self, identity: Identity, thread_id: str, state: dict[str, Any], *, expected_version: int | None
    ) -> StoredState:
        self.writes += 1
        key = (identity.tenant_id, thread_id)
        held = self._states.get(key)
        if held is not None and held[0] != identity.user_id:
            raise NotFound("thread not found")
        version = held[1].version if held is not None else 0
        if expected_version is not None and expected_version != version:
            raise Conflict("the thread's state changed since it was read", code="state_version_conflict")
        stored = StoredState(copy.deepcopy(state), version + 1)
        self._states[key] = (identity.user_id, stored)
        return StoredState(copy.deepcopy(state), stored.version)

    async def delete(self, tenant_id: str, thread_id: str) -> None:
        self._states.pop((tenant_id, thread_id), None)
