"""The main table's store on either backend, for the contract suites of its three aggregates (threads and messages,
runs, audit): the in-memory fakes or the DynamoDB adapters on moto, each suite running every case on both.

Also the few values those suites share (identities, a message, a run). Nothing heavy is imported until a DynamoDB
store is asked for.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

import pytest

from shared.models import AuditRecord, Identity, Message, Role, Run, utc_now

if TYPE_CHECKING:
    from shared.adapters.aws.dynamodb_store import DynamoDBStore
    from shared.adapters.in_memory.store import InMemoryStore

TABLE = "agent-test"
"""The table the ``aws`` fixture creates in moto."""

ALICE = Identity(tenant_id="tenant-a", user_id="alice")
BOB = Identity(tenant_id="tenant-a", user_id="bob")
# The same user id in another tenant: tenancy, not the user id, must keep data apart.
ALICE_ELSEWHERE = Identity(tenant_id="tenant-b", user_id="alice")


def store_on(backend: str, request: pytest.FixtureRequest) -> InMemoryStore | DynamoDBStore:
    """The three aggregates on ``backend`` ("memory" or "dynamodb", the latter on the test's moto)."""
    if backend == "memory":
        from shared.adapters.in_memory.store import InMemoryStore

        return InMemoryStore()
    from shared.adapters.aws.dynamodb_store import DynamoDBStore
    from tests.support.moto_lock import OneRequestAtATime

    client = OneRequestAtATime(request.getfixturevalue("aws"))
    return DynamoDBStore(TABLE, lambda: cast(Any, client))


@pytest.fixture(name="store", params=["memory", "dynamodb"])
def table_store_fixture(request: pytest.FixtureRequest) -> InMemoryStore | DynamoDBStore:
    """The table's three aggregates, on each backend in turn: a contract case runs against both (import
    ``table_store_fixture`` to have it as the ``store`` fixture)."""
    return store_on(cast(str, request.param), request)


def msg(mid: str, thread_id: str = "t1", content: str | None = None, role: Role = Role.USER) -> Message:
    return Message(id=mid, thread_id=thread_id, role=role, content=content if content is not None else f"text {mid}")


def a_run(run_id: str, thread_id: str = "t1", identity: Identity = ALICE, digest: str = "d1") -> Run:
    return Run(
        run_id=run_id, thread_id=thread_id, tenant_id=identity.tenant_id, user_id=identity.user_id, body_digest=digest
    )


def audit(kind: str, thread_id: str = "t1", tenant_id: str = "tenant-a", seconds: int = 0) -> AuditRecord:
    return AuditRecord(
        kind=kind,
        tenant_id=tenant_id,
        thread_id=thread_id,
        run_id="r1",
        user_id="alice",
        at=utc_now().replace(microsecond=0) + timedelta(seconds=seconds),
        details={"tool": "get_current_time", "layer": "profile", "note": "ünïcode"},
    )
