"""Contract of the ``MigrationLog`` port: the same cases on the in-memory fake and the DynamoDB adapter (moto), which
reads the registry item the migration runner writes."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, cast

import boto3
import pytest

from shared.adapters.aws.migration_state import DynamoDBMigrationLog, MigrationStateTable
from shared.adapters.in_memory.migration_log import InMemoryMigrationLog
from shared.migrations.model import CompletedMigration
from shared.migrations.ports import MigrationLog
from tests.support.settings import REGION, TABLE

AT = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)


@pytest.fixture(params=["memory", "dynamodb"])
def log(request: pytest.FixtureRequest) -> MigrationLog:
    if request.param == "memory":
        return InMemoryMigrationLog()
    request.getfixturevalue("aws")
    return DynamoDBMigrationLog(TABLE, lambda: cast(Any, boto3.client("dynamodb", region_name=REGION)))


async def test_a_table_no_migration_ran_on_has_none_completed(log: MigrationLog) -> None:
    assert await log.completed() == {}


async def test_completed_migrations_are_read_back_by_id(log: MigrationLog) -> None:
    first = CompletedMigration(1, "active-memory-index", AT, changed=7_000, scanned=10_000)
    second = CompletedMigration(2, "next", AT, changed=0, scanned=3)
    await log.record_completed(first)
    await log.record_completed(second)
    assert await log.completed() == {1: first, 2: second}


async def test_recording_a_migration_again_replaces_its_record(log: MigrationLog) -> None:
    await log.record_completed(CompletedMigration(1, "active-memory-index", AT, changed=5, scanned=9))
    again = CompletedMigration(1, "active-memory-index", AT, changed=6, scanned=9)
    await log.record_completed(again)
    assert await log.completed() == {1: again}


async def test_the_adapter_reads_what_the_runner_records(aws: Any) -> None:
    # GIVEN the runner's own (synchronous) view of the state recorded a completion
    record = CompletedMigration(1, "active-memory-index", AT, changed=1, scanned=2)
    MigrationStateTable(TABLE, aws).record_completed(record)
    # THEN the port's adapter, which /healthz and the memory store read through, sees it
    assert await DynamoDBMigrationLog(TABLE, lambda: aws).completed() == {1: record}
