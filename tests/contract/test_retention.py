"""Run and audit records carry the table's TTL attribute (``expires_at``); the user's data does not.

The template turns TTL on for ``expires_at`` (tests/infra checks it); these tests read the items the DynamoDB adapter
actually stores (moto) and find the attribute, as a Number of epoch seconds in the future, on exactly the kinds
docs/storage.md lists under "Retention".
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest

from shared.adapters.aws import dynamo_codec as codec
from shared.adapters.aws.dynamodb_store import DynamoDBStore
from shared.adapters.aws.table_schema import Retention
from shared.models import AuditRecord, Identity, Message, Role, Run
from shared.settings import Settings
from shared.wiring import Services
from tests.support.settings import TABLE, make_settings

ALICE = Identity(tenant_id="tenant-a", user_id="alice")
DAY_S = 24 * 3600


def _raw(aws: Any, pk: str, sk: str | None = None) -> dict[str, Any]:
    if sk is not None:
        item: dict[str, Any] = aws.get_item(TableName=TABLE, Key=codec.to_item({"PK": pk, "SK": sk}))["Item"]
        return item
    (only,) = aws.query(
        TableName=TABLE, KeyConditionExpression="PK = :pk", ExpressionAttributeValues=codec.to_item({":pk": pk})
    )["Items"]
    return dict(only)


async def _write_one_of_each(store: DynamoDBStore) -> Run:
    await store.threads.open_thread(ALICE, "t1")
    await store.threads.append_messages(ALICE, "t1", [Message(id="m1", thread_id="t1", role=Role.USER, content="hi")])
    run = Run(run_id="r1", thread_id="t1", tenant_id=ALICE.tenant_id, user_id=ALICE.user_id, body_digest="d")
    await store.runs.create_run(run)
    await store.audit.record(
        AuditRecord(kind="tool_decision", tenant_id="tenant-a", thread_id="t1", run_id="r1", user_id="alice")
    )
    return run


async def test_run_and_audit_items_expire_after_their_retention(aws: Any) -> None:
    # GIVEN the adapter with the default retention
    store = DynamoDBStore(TABLE, lambda: aws)
    before = time.time()
    # WHEN a thread, a message, a run and an audit record are stored
    await _write_one_of_each(store)
    # THEN the stored run and audit items carry expires_at as a Number in the future, at their retention
    run_item = _raw(aws, codec.run_pk("tenant-a", "r1"), codec.META)
    audit_item = _raw(aws, codec.audit_pk("tenant-a", "t1"))
    run_expires = int(run_item[codec.TTL_ATTRIBUTE]["N"])
    audit_expires = int(audit_item[codec.TTL_ATTRIBUTE]["N"])
    assert run_expires > before and audit_expires > before
    assert abs(run_expires - (before + 90 * DAY_S)) < 120
    assert abs(audit_expires - (before + 400 * DAY_S)) < 120


async def test_the_users_conversation_never_expires(aws: Any) -> None:
    store = DynamoDBStore(TABLE, lambda: aws)
    await _write_one_of_each(store)
    thread = _raw(aws, codec.thread_pk("tenant-a", "t1"), codec.META)
    message = _raw(aws, codec.thread_pk("tenant-a", "t1"), codec.msg_sk(1))
    marker = _raw(aws, codec.thread_pk("tenant-a", "t1"), codec.msg_id_sk("m1"))
    assert all(codec.TTL_ATTRIBUTE not in item for item in (thread, message, marker))


async def test_a_finished_run_keeps_its_expiry(aws: Any) -> None:
    store = DynamoDBStore(TABLE, lambda: aws, retention=Retention(run=timedelta(days=7)))
    run = await _write_one_of_each(store)
    created = int(_raw(aws, codec.run_pk("tenant-a", "r1"), codec.META)[codec.TTL_ATTRIBUTE]["N"])
    await store.runs.finish_run("tenant-a", run.run_id, status="completed", usage=[], last_stream_id=None)
    finished = int(_raw(aws, codec.run_pk("tenant-a", "r1"), codec.META)[codec.TTL_ATTRIBUTE]["N"])
    assert finished == created == int((run.created_at + timedelta(days=7)).timestamp())


@pytest.mark.parametrize(("run_days", "audit_days"), [(7, 30), (1, 3653)])
async def test_retention_is_read_from_the_environment(aws: Any, run_days: int, audit_days: int) -> None:
    # GIVEN the environment template.yaml sets (RunRetentionDays, AuditRetentionDays)
    env = {"RUN_RETENTION_DAYS": str(run_days), "AUDIT_RETENTION_DAYS": str(audit_days)}
    settings = Settings.from_env(env)
    services = Services(
        make_settings(
            run_retention_days=settings.run_retention_days, audit_retention_days=settings.audit_retention_days
        )
    )
    # WHEN the wiring builds the store
    store = services.store
    # THEN it keeps runs and audit records that long
    assert store.retention == Retention(run=timedelta(days=run_days), audit=timedelta(days=audit_days))


def test_storage_md_names_both_indexes_and_the_retention_the_code_applies() -> None:
    from pathlib import Path

    from shared.adapters.aws.table_schema import create_table

    class Recorder:
        def create_table(self, **kwargs: Any) -> None:
            self.kwargs = kwargs

    recorder = Recorder()
    create_table(recorder, "t")  # type: ignore[arg-type]
    text = (Path(__file__).resolve().parents[2] / "docs" / "storage.md").read_text(encoding="utf-8")
    for index in recorder.kwargs["GlobalSecondaryIndexes"]:
        assert f"`{index['IndexName']}`" in text
    assert f"| run | {Retention().run.days} days after the run was created" in text
    assert f"| audit record | {Retention().audit.days} days after it was written" in text
    assert (Settings().run_retention_days, Settings().audit_retention_days) == (
        Retention().run.days,
        Retention().audit.days,
    )
