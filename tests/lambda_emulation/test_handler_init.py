"""The non-streaming functions build their services during Lambda's INIT phase, not on the first invocation.

Each function runs in a fresh process as the Lambda Python runtime runs it (``tests/support/handler_runtime.py``):
import of the handler module with ``AWS_LAMBDA_FUNCTION_NAME`` set, then invocations with realistic events, on a
moto server and a redis-server. The same process without ``AWS_LAMBDA_FUNCTION_NAME`` (a plain import, as before
this change for every process) shows that the measure sees construction when it happens on the first invocation.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import handler_runtime
from tests.support.moto_server import moto_server
from tests.support.redis_server import redis_server

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

EXPECTED_AT_INIT = {
    "automation": {"services", "store", "stream", "model", "runs", "automation_store", "automation_runner"},
    "memory": {
        "services",
        "store",
        "stream",
        "model",
        "memories",
        "pending_extractions",
        "due_queue",
        "served_tenants",
    },
    "buffered": {"services", "store", "stream", "model", "runs", "verifier", "profiles", "chat", "threads"},
}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, str], Any, Path]]:
    with moto_server() as moto, redis_server() as redis_url:
        env, seeds = handler_runtime.prepare(moto, redis_url)
        yield env, seeds, tmp_path_factory.mktemp("runtime")


def _succeeded(function: str, result: dict[str, Any]) -> bool:
    if function == "automation":
        return result["status"] == "succeeded" and result["duplicate"] is False
    if function == "memory":
        return result == {"batchItemFailures": []}
    return bool(result["statusCode"] == 200 and '"items":[' in result["body"])


@pytest.mark.parametrize("function", ["automation", "memory", "buffered"])
def test_the_first_invocation_after_init_builds_nothing(function: str, world: tuple[dict[str, str], Any, Path]) -> None:
    env, seeds, work = world
    # GIVEN a fresh execution environment of the function, initialised as Lambda initialises it
    events = handler_runtime.events_for(function, seeds, 2, start=0)
    report = handler_runtime.run_handler(function, events, env, work, in_lambda=True)
    # THEN INIT built the services the function uses and created its boto3 clients
    assert EXPECTED_AT_INIT[function] <= set(report.init["built"])
    assert report.init["clients"] >= 1
    # AND it froze what it built, so full collections during invocations skip it (shared.startup_heap)
    assert report.init["frozen"] > 10_000
    # AND the first invocation did its work without building a service or creating a client
    first = report.first
    assert _succeeded(function, first["result"])
    assert first["built"] == [] and first["clients"] == 0


@pytest.mark.parametrize("function", ["automation", "memory", "buffered"])
def test_without_lambda_init_the_first_invocation_builds_the_services(
    function: str, world: tuple[dict[str, str], Any, Path]
) -> None:
    env, seeds, work = world
    # GIVEN the handler module imported outside a Lambda INIT (tests, the import-time benchmark)
    events = handler_runtime.events_for(function, seeds, 1, start=100)
    report = handler_runtime.run_handler(function, events, env, work, in_lambda=False)
    # THEN the import built nothing, and the first invocation built the services and their clients
    assert report.init["built"] == [] and report.init["clients"] == 0
    assert report.init["frozen"] == 0  # nor froze anything: a test process keeps its collector as it is
    first = report.first
    assert _succeeded(function, first["result"])
    assert "services" in first["built"] and first["clients"] >= 1
