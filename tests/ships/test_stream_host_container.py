"""The streams service's container command (template.yaml ``StreamHost``, docs/deployment.md "Fargate option"),
started from the staged artifact with only what it ships, as ECS starts the task.

The staged folder and its runtime set, installed on Python 3.12 as ``sam build`` installs them (the image,
infra/streams.Dockerfile, installs the same file the same way), run the task definition's ``Command`` with the task
definition's environment (its literal values, each ``!Ref`` of a parameter at the parameter's default), pointed at
a moto server, a cluster-mode redis-server and a scripted model: no Lambda Web Adapter, no Lambda variable. Through
it: the target group's health check, a follow stream of an unknown run (its documented ``404``), a run, and both
follow streams of that run answering its events.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest

from shared.adapters.aws.table_schema import create_table
from tests.support.model_server import ModelServer, ScriptedTurn
from tests.support.moto_server import moto_server
from tests.support.redis_server import redis_server
from tests.support.settings import REGION, TABLE, TEST_SECRET
from tests.support.shipped_artifact import Runtime
from tests.support.stream_host_task import Task, task_definition
from tests.support.streams import assert_well_formed_run, body, events_of
from tests.support.tokens import bearer

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.serial]


@pytest.fixture
def world() -> Iterator[tuple[str, str]]:
    with moto_server() as moto, redis_server(cluster=True) as redis_url:
        create_table(boto3.client("dynamodb", region_name=REGION, endpoint_url=moto), TABLE)
        yield moto, redis_url


def _first_event(response: httpx.Response) -> dict[str, Any]:
    text = ""
    for line in response.iter_lines():
        text += line + "\n"
        if line.startswith("data:"):
            (event,) = events_of(text + "\n")
            return event
    raise AssertionError(f"the stream ended without an event:\n{text}")


def test_the_container_command_serves_health_and_the_follow_streams_without_the_lambda_adapter(
    staged_artifact: Path, shipped_runtime: Runtime, world: tuple[str, str], tmp_path: Path
) -> None:
    moto, redis_url = world
    command, env, port = task_definition()
    # GIVEN the task definition's command and environment: uvicorn on the container port, no Lambda in sight
    assert command == ["functions/agent_api/serve.sh"] and port == 8080 and env["PORT"] == "8080"
    assert not [name for name in env if name.startswith(("AWS_LWA_", "AWS_LAMBDA_"))]
    assert (env["FUNCTION_TIMEOUT_S"], env["ALB_IDLE_TIMEOUT_S"]) == ("3600", "120")
    # The identity provider's placeholders give way to the test's own tokens (hs256), as in the function's test.
    for name in ("JWT_ISSUER", "JWT_AUDIENCE", "JWKS_URL"):
        env.pop(name)
    env.update(
        {
            "TABLE_NAME": TABLE,
            "AWS_REGION": REGION,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "DYNAMODB_ENDPOINT_URL": moto,
            "REDIS_URL": redis_url,
            "AUTH_MODE": "hs256",
            "JWT_SECRET": TEST_SECRET,
            "LLM_API_KEY": "test-key",
        }
    )
    with ModelServer() as model:
        env["LLM_BASE_URL"] = model.base_url
        task = Task(staged_artifact, shipped_runtime, command, env, tmp_path / "task.log")
        try:
            # WHEN the target group's health check asks, and a client follows a run that does not exist
            healthy_after = task.wait_healthy()
            keep_alive = task.command_line()
            unknown = httpx.get(f"{task.url}/api/v1/agent/runs/run-nobody/events", headers=bearer(), timeout=30)
            # AND a run is streamed (fargate-all), then followed again by run and by thread (fargate-follow)
            model.enqueue(ScriptedTurn(text=["Hello ", "from ", "Fargate."]))
            run = httpx.post(
                f"{task.url}/api/v1/agent", json=body("th-fargate", "run-fargate", "hi"), headers=bearer(), timeout=60
            )
            again = httpx.get(f"{task.url}/api/v1/agent/runs/run-fargate/events", headers=bearer(), timeout=60)
            with httpx.stream(
                "GET", f"{task.url}/api/v1/threads/th-fargate/events", headers=bearer(), timeout=30
            ) as thread:
                thread_status = thread.status_code
                first_on_thread = _first_event(thread)
        finally:
            exit_code = task.stop()
            output = task.output()
    # THEN it is healthy, and keeps idle connections 5 s longer than the ALB (120 s by default)
    assert healthy_after < 30, f"healthy after {healthy_after:.1f} s"
    assert keep_alive[keep_alive.index("--timeout-keep-alive") + 1] == "125"
    # AND an unknown run is the documented 404 not_found, as JSON before any stream
    assert unknown.status_code == 404, unknown.text
    assert unknown.json()["error"]["code"] == "not_found"
    # AND the run streamed, and both follow streams answer its events
    assert run.status_code == 200, run.text
    streamed = events_of(run.text)
    assert assert_well_formed_run(streamed)["type"] == "RUN_FINISHED"
    text = "".join(e["delta"] for e in streamed if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert text == "Hello from Fargate."
    assert again.status_code == 200 and again.headers["content-type"].startswith("text/event-stream")
    assert [e["type"] for e in events_of(again.text)] == [e["type"] for e in streamed]
    assert thread_status == 200
    assert (first_on_thread["type"], first_on_thread["runId"]) == ("RUN_STARTED", "run-fargate")
    # AND it stopped on SIGTERM as ECS stops a task: a graceful shutdown (uvicorn then exits by the signal it got),
    # with nothing missing from what ships
    assert exit_code in (0, -15), output[-4000:]
    assert "Application shutdown complete." in output and "Finished server process" in output, output[-4000:]
    assert "ModuleNotFoundError" not in output and "Traceback" not in output, output[-4000:]
