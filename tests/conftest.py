"""Shared fixtures: a real redis-server, moto for AWS, services, the app in-process.

Fixtures only: helpers a test imports (settings, tokens) live in tests/support/, and nothing imports this module.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any

import pytest

from tests.support.redis_server import redis_server
from tests.support.scripted_model import ScriptedModel, check_scripts
from tests.support.settings import REGION, TABLE, make_settings

if TYPE_CHECKING:
    # Imported where used: moto, boto3 and the app take seconds to import, and the unit tier needs none of them.
    import httpx

    from shared.adapters.aws.dynamodb_store import DynamoDBStore
    from shared.adapters.redis_stream import RedisEventStream
    from shared.wiring import Services


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files that hold a ``slow`` test run first, each file's tests still together and in order.

    Under xdist (``--dist loadfile``, make test) a file is one unit of work, handed out in this order: the longest
    units start first and the short ones fill in behind them, so no worker is left running a long file alone at the
    end (longest-processing-time-first scheduling). Without xdist only the order changes.
    """
    slow_files = {item.path for item in items if item.get_closest_marker("slow") is not None}
    first_seen: dict[object, int] = {}
    for item in items:
        first_seen.setdefault(item.path, len(first_seen))
    items.sort(key=lambda item: (item.path not in slow_files, first_seen[item.path]))


@pytest.fixture(autouse=True)
def _no_real_cloud(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test reaches a real AWS account or model by accident."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SECURITY_TOKEN": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": REGION,
    }.items():
        monkeypatch.setenv(name, value)
    for name in ("LLM_BASE_URL", "LLM_API_KEY", "REDIS_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(autouse=True)
def _scripts_are_used_up() -> Iterator[None]:
    """Every ``ScriptedModel`` made during a test is asked exactly for its scripted turns, no more, no fewer."""
    ScriptedModel.made.clear()  # models of wider-scoped fixtures are not this test's to check
    yield
    check_scripts()


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    with redis_server() as url:
        yield url


@pytest.fixture(autouse=True)
def _fresh_redis(request: pytest.FixtureRequest) -> None:
    """Tests that use the session's redis-server start from an empty one, as each starts from an empty moto."""
    if "redis_url" not in request.fixturenames:
        return
    import redis

    client = redis.Redis.from_url(request.getfixturevalue("redis_url"))
    try:
        client.flushall()
    finally:
        client.close()


@pytest.fixture
def aws() -> Iterator[Any]:
    import boto3
    from moto import mock_aws

    from shared.adapters.aws.clients import serialise_calls
    from shared.adapters.aws.table_schema import create_table

    # moto in-process is not thread-safe: every client of this process (the test's and those the services build
    # themselves) sends one request at a time while it runs.
    serialise_calls()
    try:
        with mock_aws():
            client = boto3.client("dynamodb", region_name=REGION)
            create_table(client, TABLE)
            yield client
    finally:
        serialise_calls(on=False)


@pytest.fixture
def store(aws: Any) -> DynamoDBStore:
    from shared.adapters.aws.dynamodb_store import DynamoDBStore
    from tests.support.moto_lock import OneRequestAtATime

    client = OneRequestAtATime(aws)
    return DynamoDBStore(TABLE, lambda: client)


@pytest.fixture
async def redis_stream(redis_url: str) -> AsyncIterator[RedisEventStream]:
    from redis.asyncio import Redis

    from shared.adapters.redis_stream import RedisEventStream

    client = Redis.from_url(redis_url)
    yield RedisEventStream(client)
    await client.aclose()


@pytest.fixture
def make_services(store: DynamoDBStore, redis_stream: RedisEventStream) -> Any:
    from shared.wiring import ServiceOverrides, Services

    def build(model: Any, **settings: Any) -> Services:
        return Services(
            make_settings(**settings), overrides=ServiceOverrides(store=store, stream=redis_stream, model=model)
        )

    return build


@pytest.fixture
def asgi_client() -> Any:
    """``async with asgi_client(services) as client``: the app in-process through httpx's ASGI transport."""

    import httpx

    from functions.agent_api.app import create_app

    def build(services: Services) -> httpx.AsyncClient:
        app = create_app(services)
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://app")

    return build
