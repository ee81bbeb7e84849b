"""A function in moto's Lambda and the asynchronous invocations sent to it, for the invoker's contract suite and the
migration function's tests."""

from __future__ import annotations

import io
import json
import zipfile
from typing import Any

import boto3

from tests.support.settings import REGION


def lambda_function(name: str) -> str:
    """A function in moto's Lambda (its code never runs: ``use_docker`` is off), returns its ARN."""
    role = boto3.client("iam", region_name=REGION).create_role(RoleName=f"{name}-role", AssumeRolePolicyDocument="{}")
    code = io.BytesIO()
    with zipfile.ZipFile(code, "w") as archive:
        archive.writestr("handler.py", "def handler(event, context):\n    return event\n")
    created = boto3.client("lambda", region_name=REGION).create_function(
        FunctionName=name,
        Runtime="python3.12",
        Role=role["Role"]["Arn"],
        Handler="handler.handler",
        Code={"ZipFile": code.getvalue()},
    )
    arn: str = created["FunctionArn"]
    return arn


def record_invocations(client: Any) -> list[tuple[str, dict[str, Any]]]:
    """What the client sent, as Lambda receives it (an asynchronous invocation only; anything else fails)."""
    seen: list[tuple[str, dict[str, Any]]] = []

    def sent(params: dict[str, Any], **_: Any) -> None:
        assert params["InvocationType"] == "Event"
        seen.append((params["FunctionName"], json.loads(params["Payload"])))

    client.meta.events.register("before-parameter-build.lambda.Invoke", sent)
    return seen
