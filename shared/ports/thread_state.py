"""The thread-state port: a thread's shared state (AG-UI ``STATE_SNAPSHOT``), stored beside the thread and versioned.

Its value type lives in ``shared.thread_state.models`` (which imports no port).
"""

from __future__ import annotations

from typing import Any, Protocol

from shared.models import Identity
from shared.thread_state.models import StoredState


class ThreadStateStore(Protocol):
    """One state per thread, owned by the thread's user.

    Fake: ``InMemoryThreadStates`` (shared/adapters/in_memory/thread_state.py); adapter:
    ``DynamoDBThreadStates`` (shared/adapters/aws/thread_state.py); contract:
    tests/contract/test_thread_state_contract.py."""

    async def read(self, identity: Identity, thread_id: str) -> StoredState | None:
        """The thread's state; None when it has none, or when it is another user's or tenant's (never say which)."""
        ...

    async def write(
        self, identity: Identity, thread_id: str, state: dict[str, Any], *, expected_version: int | None
    ) -> StoredState:
        """Store ``state`` as the thread's, one version on. ``expected_version``: the version the writer read (0:
        none stored), or None to replace whatever is stored (a client's state). Raises ``Conflict``
        ``state_version_conflict`` when the stored version is another, and ``NotFound`` for another user's state."""
        ...

    async def delete(self, tenant_id: str, thread_id: str) -> None:
        """Forget the thread's state (the thread is being erased); nothing happens when there is none."""
        ...
