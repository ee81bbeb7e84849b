"""Two execution environments of the streaming function sharing one moto server (DynamoDB) and one redis-server,
and the scripted model server they both call over HTTP with the real ``openai`` client."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from shared.adapters.aws.dynamodb_store import DynamoDBStore
from shared.adapters.aws.table_schema import create_table
from tests.support.lambda_instance import Instance
from tests.support.model_server import ModelServer
from tests.support.moto_server import moto_server
from tests.support.settings import REGION, TABLE, TEST_SECRET

from .leases import HEARTBEAT_S, LEASE_S


@pytest.fixture
def dynamodb_url() -> Iterator[str]:
    with moto_server() as url:
        client = boto3.client("dynamodb", region_name=REGION, endpoint_url=url)
        create_table(client, TABLE)
        yield url


@pytest.fixture
def shared_store(dynamodb_url: str) -> DynamoDBStore:
    """The test's own view of the table both instances write (to read the ledger and the thread directly)."""
    client = boto3.client("dynamodb", region_name=REGION, endpoint_url=dynamodb_url)
    return DynamoDBStore(TABLE, lambda: client)


@pytest.fixture
def model_server() -> Iterator[ModelServer]:
    with ModelServer() as server:
        yield server


@pytest.fixture
def instances(
    dynamodb_url: str, redis_url: str, model_server: ModelServer, tmp_path: Path
) -> Iterator[tuple[Instance, Instance]]:
    """Instances A and B, configured as template.yaml configures the function (lease shortened for the tests)."""
    env: dict[str, Any] = {
        "TABLE_NAME": TABLE,
        "AWS_REGION": REGION,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "DYNAMODB_ENDPOINT_URL": dynamodb_url,
        "REDIS_URL": redis_url,
        "LLM_BASE_URL": model_server.base_url,
        "LLM_API_KEY": "test-key",
        "LLM_MAX_RETRIES": "0",
        "AUTH_MODE": "hs256",
        "JWT_SECRET": TEST_SECRET,
        "SSE_PING_INTERVAL_S": "1",
        "RUN_LEASE_S": str(LEASE_S),
        "RUN_HEARTBEAT_S": str(HEARTBEAT_S),
    }
    a = Instance("a", env, tmp_path)
    b = Instance("b", env, tmp_path)
    try:
        a.wait_ready()
        b.wait_ready()
        yield a, b
    finally:
        a.stop()
        b.stop()
