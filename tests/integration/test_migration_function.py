"""The migration function as Lambda runs it, and the operators' command line, on moto.

The Lambda context is emulated: its remaining time drops by one second each time the runner asks (it asks before
every page), so "the timeout is near" comes after a known number of pages. The function's self-invocation goes
through the real adapter to moto's Lambda (which queues it without running anything), and is captured there; the
test then hands the captured event to the handler as Lambda would, with a fresh context.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import botocore.client
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from functions.migrate import cli
from functions.migrate.handler import STOP_BEFORE_TIMEOUT_MS, lambda_handler
from shared.adapters.aws.clients import serialise_calls
from shared.adapters.aws.function_invoker import LambdaInvoker
from shared.adapters.aws.migration_state import MigrationStateTable, run_key
from shared.adapters.aws.table_schema import create_table
from shared.wiring import ServiceOverrides, Services
from tests.support.lambda_functions import lambda_function, record_invocations
from tests.support.migration_context import LambdaContext
from tests.support.old_shapes import Seeded, before_index, memory, seed
from tests.support.settings import REGION, TABLE, make_settings


@dataclass
class World:
    dynamodb: Any
    function_arn: str
    invocations: list[tuple[str, dict[str, Any]]]
    services: Services


@pytest.fixture
def world() -> Iterator[World]:
    serialise_calls()  # moto in-process: the services' clients send one request at a time
    try:
        with mock_aws(config={"lambda": {"use_docker": False}}):
            dynamodb = boto3.client("dynamodb", region_name=REGION)
            create_table(dynamodb, TABLE)
            arn = lambda_function("agent-dev-migrate")
            lambda_client = boto3.client("lambda", region_name=REGION)
            invoker = LambdaInvoker(lambda: lambda_client)
            services = Services(make_settings(), overrides=ServiceOverrides(function_invoker=invoker))
            yield World(dynamodb, arn, record_invocations(lambda_client), services)
    finally:
        serialise_calls(on=False)


@pytest.fixture
def puts(monkeypatch: pytest.MonkeyPatch) -> Counter[tuple[str, str]]:
    """Memory items written by any client of this process, per key (a refused conditional write is not counted)."""
    written: Counter[tuple[str, str]] = Counter()
    original = botocore.client.BaseClient._make_api_call

    def counting(self: Any, operation: str, params: dict[str, Any]) -> Any:
        result = original(self, operation, params)
        if operation == "PutItem" and params["Item"].get("kind", {}).get("S") == "memory":
            written[(params["Item"]["PK"]["S"], params["Item"]["SK"]["S"])] += 1
        return result

    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", counting)
    return written


@pytest.mark.slow
def test_the_function_invokes_itself_before_its_timeout_and_the_next_invocation_resumes(
    world: World, puts: Counter[tuple[str, str]]
) -> None:
    # GIVEN 10,000 memories, 4,200 of them to migrate, and an operator's event
    seeded = Seeded(10_000)
    seed(world.dynamodb, TABLE, seeded.items)
    event = {"action": "run", "page_size": 500, "rate_wcu": 1_000_000}
    # WHEN the function runs in an invocation whose remaining time reaches the margin after 7 pages
    context = LambdaContext(STOP_BEFORE_TIMEOUT_MS + 6_000, world.function_arn, step_ms=1_000)
    first = lambda_handler(event, context, world.services)
    # THEN it stopped before the margin with its checkpoints saved, and queued itself with the next hop
    assert first["finished"] is False and first["reinvoked"] is True
    assert first["migrations"][0]["outcome"] == "stopped" and first["migrations"][0]["pages"] == 7
    assert world.invocations == [(world.function_arn, {**event, "hop": 1})]
    state = MigrationStateTable(TABLE, world.dynamodb).load(1)
    assert state is not None and 0 < state.totals().changed < 4_200
    # WHEN Lambda runs the queued invocation (the event it received, a fresh environment's full 15 minutes)
    (_, queued) = world.invocations[0]
    second = lambda_handler(queued, LambdaContext(900_000, world.function_arn, aws_request_id="req-2"), world.services)
    # THEN it went on from the checkpoints to the end, recorded the migration, and queued nothing more
    assert second["finished"] is True and second["reinvoked"] is False and second["hop"] == 1
    assert len(world.invocations) == 1
    assert MigrationStateTable(TABLE, world.dynamodb).completed()[1].changed == 4_200
    # AND across both invocations every old active memory was written exactly once
    assert set(puts) == seeded.needs_change and set(puts.values()) == {1}


def test_an_invocation_that_cannot_make_progress_does_not_invoke_itself(world: World) -> None:
    seed(world.dynamodb, TABLE, [before_index(memory(1, user="alice", active=True))])
    context = LambdaContext(STOP_BEFORE_TIMEOUT_MS - 1, world.function_arn)
    result = lambda_handler({"action": "run"}, context, world.services)
    assert result["reinvoked"] is False and result["migrations"][0]["pages"] == 0
    assert world.invocations == []


def test_status_and_dry_run_write_nothing_and_invoke_nothing(world: World) -> None:
    seed(world.dynamodb, TABLE, [before_index(memory(i, user="alice", active=True)) for i in range(3)])
    context = LambdaContext(900_000, world.function_arn)
    status = lambda_handler({"action": "status"}, context, world.services)
    assert status == {
        "action": "status",
        "migrations": [
            {"migration": "0001-active-memory-index", "completed": False},
            {"migration": "0002-thread-list-index", "completed": False},
            {"migration": "0003-message-parents", "completed": False},
            {"migration": "0004-thread-previews", "completed": False},
        ],
    }
    dry = lambda_handler({"action": "dry-run"}, context, world.services)
    assert dry["migrations"][0]["outcome"] == "dry_run" and dry["migrations"][0]["counts"]["changed"] == 3
    assert "Item" not in world.dynamodb.get_item(TableName=TABLE, Key=run_key(1))
    assert world.invocations == []


def test_an_unknown_action_is_refused(world: World) -> None:
    with pytest.raises(ValueError, match="unknown action"):
        lambda_handler({"action": "drop-table"}, LambdaContext(900_000, world.function_arn), world.services)


def test_the_command_line_lists_runs_and_reports(aws: Any, capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN a table with two old-shape active memories (TABLE_NAME and the region come from the environment)
    seed(aws, TABLE, [before_index(memory(i, user="alice", active=True)) for i in range(2)])
    env = make_settings()
    # WHEN an operator lists, asks the status, runs, and asks again
    assert cli.main(["list"], env=env) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [row["migration"] for row in listed] == [
        "0001-active-memory-index",
        "0002-thread-list-index",
        "0003-message-parents",
        "0004-thread-previews",
    ]
    assert cli.main(["status"], env=env) == 1  # pending
    capsys.readouterr()
    assert cli.main(["run", "--segments", "2", "--rate-wcu", "1000"], env=env) == 0
    ran = json.loads(capsys.readouterr().out)
    # THEN the run completed and the status says so
    assert ran["finished"] and ran["migrations"][0]["counts"]["changed"] == 2
    assert cli.main(["status"], env=env) == 0
    memory_row, thread_row, message_row, preview_row = json.loads(capsys.readouterr().out)
    assert memory_row["completed"] and memory_row["changed"] == 2
    assert thread_row["completed"] and thread_row["changed"] == 0  # no thread in this table
    assert message_row["completed"] and message_row["changed"] == 0  # nor a message
    assert preview_row["completed"] and preview_row["changed"] == 0


def test_the_command_line_refuses_an_unknown_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["drop"])
    assert exit_.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_a_refused_write_is_not_counted_as_a_write(world: World, puts: Counter[tuple[str, str]]) -> None:
    # the counting fixture itself: a conditional write the table refuses raises and is not counted
    item = before_index(memory(1, user="alice", active=True))
    world.dynamodb.put_item(TableName=TABLE, Item=item)
    with pytest.raises(ClientError):
        world.dynamodb.put_item(TableName=TABLE, Item=item, ConditionExpression="attribute_not_exists(PK)")
    assert list(puts.values()) == [1]
