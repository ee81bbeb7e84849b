"""Two execution environments of the streaming function sharing one moto server (DynamoDB) and one redis-server,
and the scripted model server they both call over HTTP with the real ``openai`` client."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from shared.adapters.aws.dynamodb_store import DynamoDBStore
from shared.adapters.aws.table_schema import create_table
from tests.support.lambda_instance import Instance, function_env, started
from tests.support.model_server import ModelServer
from tests.support.moto_server import moto_server, reset
from tests.support.settings import REGION, TABLE

from .leases import LEASED


@pytest.fixture(scope="session")
def moto_url() -> Iterator[str]:
    """One moto server per test session (each xdist worker has its own), reset before each test that uses it."""
    with moto_server() as url:
        yield url


@pytest.fixture
def dynamodb_url(moto_url: str) -> str:
    """An emulation that holds nothing but the app's table, as a fresh moto server would."""
    reset(moto_url)
    client = boto3.client("dynamodb", region_name=REGION, endpoint_url=moto_url)
    create_table(client, TABLE)
    return moto_url


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
    env = {**function_env(dynamodb_url, redis_url, model_server.base_url), **LEASED}
    with started(env, tmp_path) as (a, b):
        yield a, b
