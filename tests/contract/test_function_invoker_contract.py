"""Contract of the ``FunctionInvoker`` port: the in-memory fake and the Lambda adapter (moto's Lambda, which accepts
an asynchronous invocation without running the function) record the same invocation: that function, queued
(``InvocationType=Event``), with that payload as its event."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from moto import mock_aws

from shared.adapters.aws.function_invoker import LambdaInvoker
from shared.adapters.in_memory.invoker import RecordingInvoker
from shared.migrations.ports import FunctionInvoker
from tests.support.lambda_functions import lambda_function, record_invocations
from tests.support.settings import REGION


@dataclass
class Backend:
    invoker: FunctionInvoker
    function: str
    invocations: list[tuple[str, dict[str, Any]]]


@pytest.fixture(params=["memory", "lambda"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    if request.param == "memory":
        fake = RecordingInvoker()
        yield Backend(fake, "arn:aws:lambda:us-east-1:123456789012:function:migrate", fake.invocations)
        return
    with mock_aws(config={"lambda": {"use_docker": False}}):
        arn = lambda_function("migrate")
        client = boto3.client("lambda", region_name=REGION)
        yield Backend(LambdaInvoker(lambda: client), arn, record_invocations(client))


async def test_an_invocation_is_queued_with_its_payload(backend: Backend) -> None:
    await backend.invoker.invoke_async(backend.function, {"action": "run", "hop": 1, "rate_wcu": 50.0})
    assert backend.invocations == [(backend.function, {"action": "run", "hop": 1, "rate_wcu": 50.0})]


async def test_invocations_are_recorded_in_order(backend: Backend) -> None:
    for hop in (1, 2, 3):
        await backend.invoker.invoke_async(backend.function, {"hop": hop})
    assert [payload["hop"] for _, payload in backend.invocations] == [1, 2, 3]
