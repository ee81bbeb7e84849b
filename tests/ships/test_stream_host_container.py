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

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
import yaml

from shared.adapters.aws.table_schema import create_table
from tests.support import shipped_artifact
from tests.support.model_server import ModelServer, ScriptedTurn
from tests.support.moto_server import moto_server
from tests.support.redis_server import free_port, redis_server
from tests.support.settings import REGION, TABLE, TEST_SECRET
from tests.support.shipped_artifact import Runtime
from tests.support.streams import assert_well_formed_run, body, events_of
from tests.support.tokens import bearer

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.serial]

REPO = Path(__file__).resolve().parents[2]


class _Intrinsics(yaml.SafeLoader):
    """Reads template.yaml keeping each intrinsic function as ``(name, argument)``."""


def _intrinsic(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> tuple[str, Any]:
    return suffix, loader.construct_scalar(node) if isinstance(node, yaml.ScalarNode) else None


_Intrinsics.add_multi_constructor("!", _intrinsic)


def task_definition() -> tuple[list[str], dict[str, str], int]:
    """The streams container's command, environment and port as template.yaml gives them: literal values, and each
    ``!Ref`` of a parameter at its default; what the deployment supplies (a table name, the cache address) is left
    for the test to point at its own resources."""
    template: dict[str, Any] = yaml.load((REPO / "template.yaml").read_text(encoding="utf-8"), Loader=_Intrinsics)
    parameters = template["Parameters"]
    (container,) = template["Resources"]["StreamHostTaskDefinition"]["Properties"]["ContainerDefinitions"]
    env: dict[str, str] = {}
    for item in container["Environment"]:
        value = item["Value"]
        if isinstance(value, tuple) and value[0] == "Ref" and value[1] in parameters:
            value = parameters[value[1]].get("Default", "")
        if isinstance(value, str | int | float | bool):
            env[item["Name"]] = str(value)
    return container["Command"], env, int(container["PortMappings"][0]["ContainerPort"])


class Task:
    """The container's command in the staged folder (the image's WORKDIR), on a free port."""

    def __init__(self, staged: Path, runtime: Runtime, command: list[str], env: dict[str, str], log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**env, "PORT": str(self.port), "HOST": "127.0.0.1", "PYTHON": str(runtime.python)}
        self.log = log
        self._log = open(log, "wb")  # closed in stop()
        self.proc = subprocess.Popen(
            [str(staged / command[0]), *command[1:]],
            env=shipped_artifact.process_environment(runtime, staged, env),
            cwd=staged,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def wait_healthy(self, timeout_s: float = 60) -> float:
        """Seconds until ``/healthz`` answers 200, as the target group's health check asks it."""
        started = time.monotonic()
        while time.monotonic() - started < timeout_s:
            if self.proc.poll() is not None:
                raise AssertionError(f"the command exited with {self.proc.returncode}:\n{self.output()[-4000:]}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=0.5).status_code == 200:
                    return time.monotonic() - started
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"not healthy within {timeout_s} s:\n{self.output()[-4000:]}")

    def command_line(self) -> list[str]:
        return Path(f"/proc/{self.proc.pid}/cmdline").read_bytes().decode().split("\0")

    def output(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log.read_text(encoding="utf-8", errors="replace")

    def stop(self) -> int:
        self.proc.terminate()  # what ECS sends first when it stops a task
        try:
            code = self.proc.wait(timeout=25)  # within the task definition's StopTimeout (30 s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self._log.close()
        return code


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
