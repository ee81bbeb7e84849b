"""The main table's three aggregate adapters over one DynamoDB client: threads and messages, runs, audit.

Each aggregate has its own adapter module (``threads``, ``runs``, ``audit``); this one only builds the three over one
client (a ``shared.wiring.MainTable``) and forwards nothing: each component is given the adapter it uses. The
composition root builds it once, with the process's one client; tests and benchmarks build it with theirs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from shared.adapters.aws.audit import DynamoDBAuditLog
from shared.adapters.aws.runs import DynamoDBRunLedger
from shared.adapters.aws.table_schema import Retention
from shared.adapters.aws.threads import DynamoDBThreads

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


class DynamoDBStore:
    """The three adapters of one table, sharing ``client_factory`` (so one client); ``request_count`` is theirs
    added up. The threads adapter writes run records through the ledger beside it (the admission's transaction).
    ``thread_list_complete``: whether migration 2 has completed (``thread_list``); None: the table never held the
    old shape (tests, a table this release made)."""

    def __init__(
        self,
        table_name: str,
        client_factory: Callable[[], DynamoDBClient],
        *,
        retention: Retention | None = None,
        thread_list_complete: Callable[[], Awaitable[bool]] | None = None,
    ) -> None:
        retention = retention or Retention()
        client_factory = _built_once(client_factory)
        self.runs = DynamoDBRunLedger(table_name, client_factory, retention=retention.run)
        self.threads = DynamoDBThreads(
            table_name, client_factory, runs=self.runs, list_complete=thread_list_complete
        )
        self.audit = DynamoDBAuditLog(table_name, client_factory, retention=retention.audit)

    @property
    def retention(self) -> Retention:
        """How long the run and audit adapters keep their records."""
        return Retention(run=self.runs.retention, audit=self.audit.retention)

    @property
    def client(self) -> DynamoDBClient:
        """The client the three share (built on first use; the warm-up builds it during init)."""
        return self.threads.client

    @property
    def request_count(self) -> int:
        """Requests the three adapters sent to DynamoDB (benchmarks and the window's cost tests count them)."""
        return self.threads.request_count + self.runs.request_count + self.audit.request_count


def _built_once(factory: Callable[[], DynamoDBClient]) -> Callable[[], DynamoDBClient]:
    """``factory``, called at most once: the three adapters share the client it builds."""
    built: list[DynamoDBClient] = []

    def client() -> DynamoDBClient:
        if not built:
            built.append(factory())
        return built[0]

    return client
