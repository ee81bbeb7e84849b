"""Each function of the deployed artifact, started as Lambda starts it, with only what the artifact ships.

The staged folder (``scripts/stage_lambda_src.sh``) and its ``requirements.txt`` (the runtime lock) are installed as
``sam build`` installs them, on Python 3.12, into a folder beside a bare venv: no test extra, no package the test
venv happens to have. Then:

- the streaming function's ``run.sh`` is started under the Web Adapter's contract (the variables template.yaml sets,
  readiness polled on ``AWS_LWA_READINESS_CHECK_PATH``, the port of ``PORT``), and streams a full chat turn with a
  tool call from a scripted model over HTTP, on a moto server and a cluster-mode redis-server;
- the buffered, memory, automation, sweeper, migration and background-run handlers are each initialised and invoked
  with a sample event in a fresh process, as the Python runtime does (``tests/support/handler_runtime.py``);
- every locked runtime package has a wheel for the functions' platform (manylinux aarch64, CPython 3.12).

A module that imports a distribution the runtime lock does not hold fails here, as it would fail on Lambda.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest

from shared.adapters.aws.table_schema import create_table
from shared.migrations.registry import MIGRATIONS
from tests.support import handler_runtime, shipped_artifact
from tests.support.agui_clients import validate_sse
from tests.support.model_server import ModelServer, ScriptedToolCall, ScriptedTurn
from tests.support.moto_server import moto_server
from tests.support.redis_server import free_port, redis_server
from tests.support.settings import REGION, TABLE, TEST_SECRET
from tests.support.shipped_artifact import Runtime
from tests.support.streams import assert_well_formed_run, body, events_of
from tests.support.tokens import bearer
from tests.support.traces import OtlpReceiver, otlp_receiver

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.serial]

# Lambda gives an execution environment's INIT 10 s; the Web Adapter's readiness check has to pass within it.
LAMBDA_INIT_LIMIT_S = 10.0
FUNCTIONS = {
    "buffered": "BufferedApiFunction",
    "memory": "MemoryFunction",
    "automation": "AutomationFunction",
    "sweeper": "SweeperFunction",
    "migrate": "MigrationFunction",
    "background_run": "BackgroundRunFunction",
}


def _port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


class StreamingFunction:
    """``run.sh`` of the staged folder under the Web Adapter's contract: the adapter starts the handler script, then
    polls the readiness path on ``PORT`` until it answers, and only then sends the invocation."""

    def __init__(self, staged: Path, runtime: Runtime, env: dict[str, str], log: Path) -> None:
        self.port = int(env.get("AWS_LWA_PORT") or env["PORT"])
        if not _port_is_free(self.port):  # another service of this machine holds the template's port
            self.port = free_port()
        env = {**env, "PORT": str(self.port), "HOST": "127.0.0.1", "PYTHON": str(runtime.python)}
        self.readiness_path = env["AWS_LWA_READINESS_CHECK_PATH"]
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self._log = open(log, "wb")  # closed in stop()
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [str(staged / "functions" / "agent_api" / "run.sh")],  # executed directly, as the adapter does
            env=shipped_artifact.process_environment(runtime, staged, env),
            cwd=staged,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def wait_ready(self, timeout_s: float = 60) -> float:
        """Seconds until the readiness check answered 200, as the adapter polls it."""
        deadline = self.started + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"run.sh exited with {self.proc.returncode}:\n{self.output()[-4000:]}")
            try:
                if httpx.get(f"{self.url}{self.readiness_path}", timeout=0.5).status_code == 200:
                    return time.monotonic() - self.started
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"not ready within {timeout_s} s:\n{self.output()[-4000:]}")

    def output(self) -> str:
        self._log.flush()
        return self.log.read_text(encoding="utf-8", errors="replace")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


@pytest.fixture
def world() -> Iterator[tuple[str, str]]:
    """A moto server with the table, and a redis-server in cluster mode (template.yaml: ``REDIS_CLUSTER_MODE``)."""
    with moto_server() as moto, redis_server(cluster=True) as redis_url:
        create_table(boto3.client("dynamodb", region_name=REGION, endpoint_url=moto), TABLE)
        yield moto, redis_url


@pytest.fixture(params=[False, True], ids=["traces-off", "traces-on"])
def receiver(request: pytest.FixtureRequest) -> Iterator[OtlpReceiver | None]:
    """Traces off (the template's default), or on, exporting to an OTLP/HTTP receiver here."""
    if not request.param:
        yield None
        return
    with otlp_receiver() as received:
        yield received


def test_run_sh_starts_under_the_web_adapter_contract_and_streams_a_turn_with_a_tool_call(
    staged_artifact: Path,
    shipped_runtime: Runtime,
    world: tuple[str, str],
    tmp_path: Path,
    receiver: OtlpReceiver | None,
) -> None:
    moto, redis_url = world
    env = shipped_artifact.template_environment("StreamingApiFunction")
    env.pop("AWS_LAMBDA_EXEC_WRAPPER")  # the adapter layer's bootstrap, which this test plays itself
    assert env["AWS_LWA_INVOKE_MODE"] == "response_stream"
    env.update(
        {
            "TABLE_NAME": TABLE,
            "AWS_REGION": REGION,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "DYNAMODB_ENDPOINT_URL": moto,
            "REDIS_URL": redis_url,
            "AUTH_MODE": "hs256",
            "JWT_SECRET": TEST_SECRET,
            "LLM_API_KEY": "test-key",
        }
    )
    if receiver is not None:  # traces on: the exporter and what it needs are in the runtime lock
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.endpoint
        env["OTEL_TRACES_SAMPLER_ARG"] = "1.0"  # a parameter's value in the template (TracesSampleRatio)
    with ModelServer() as model:
        env["LLM_BASE_URL"] = model.base_url
        function = StreamingFunction(staged_artifact, shipped_runtime, env, tmp_path / "run.log")
        try:
            # GIVEN the function started by the adapter: ready within Lambda's INIT limit
            ready_after = function.wait_ready()
            assert ready_after < LAMBDA_INIT_LIMIT_S, f"readiness after {ready_after:.1f} s"
            # WHEN a user asks for the time and the model calls the tool, then answers
            model.enqueue(
                ScriptedTurn(
                    tool_calls=[ScriptedToolCall(name="get_current_time", arguments='{"timezone": "UTC"}', id="call-1")]
                )
            )
            model.enqueue(ScriptedTurn(text=["It is ", "noon."]))
            response = httpx.post(
                f"{function.url}/api/v1/agent",
                json=body("th-ships", "run-ships", "What time is it?"),
                headers=bearer(),
                timeout=60,
            )
            output = function.output()
        finally:
            function.stop()
    # THEN the stream is a well-formed AG-UI run that the official validator accepts
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    events = events_of(response.text)
    assert assert_well_formed_run(events)["type"] == "RUN_FINISHED"
    validation = validate_sse(response.text)
    assert validation.exit_code == 0, validation.report
    # AND the tool ran on the server, its result is on the stream, and the answer followed it
    started = [e for e in events if e["type"] == "TOOL_CALL_START"]
    assert [e["toolCallName"] for e in started] == ["get_current_time"]
    result = next(e for e in events if e["type"] == "TOOL_CALL_RESULT")
    assert "UTC" in result["content"] or "time" in result["content"].lower(), result
    text = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert "It is noon." in text
    # AND the start-up warm-up ran with what ships (no import error, no failed start-up request)
    assert "ModuleNotFoundError" not in output and "start-up requests" not in output, output[-4000:]
    # AND with traces on, the run's spans were exported before the response ended
    if receiver is not None:
        runs = [s for s in receiver.spans if s.name == "invoke_agent chat_default"]
        assert [s.attributes["agent.run.id"] for s in runs] == ["run-ships"]
        assert any(s.name == "execute_tool get_current_time" for s in receiver.spans)


@pytest.fixture(scope="module")
def handler_world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, str], Any, Path]]:
    with moto_server() as moto, redis_server(cluster=True) as redis_url:
        env, seeds = handler_runtime.prepare(moto, redis_url)
        yield env, seeds, tmp_path_factory.mktemp("ships-handlers")


def _succeeded(function: str, result: dict[str, Any]) -> bool:
    if function == "automation":
        return bool(result["status"] == "succeeded")
    if function == "memory":
        return result == {"batchItemFailures": []}
    if function == "sweeper":
        return result["failures"] == 0 and result["found"] == len(result["ended"])
    if function == "background_run":  # every queued background run of the thread started and succeeded
        return result["drained"] is True and set(result["runs"].values()) == {"succeeded"} and len(result["runs"]) == 3
    if function == "migrate":  # a dry run of every registered migration, in order
        ran = [(m["migration"], m["outcome"]) for m in result["migrations"]]
        return ran == [(migration.label, "dry_run") for migration in MIGRATIONS]
    return bool(result["statusCode"] == 200 and '"items":[' in result["body"])


@pytest.mark.parametrize("function", sorted(FUNCTIONS))
def test_each_handler_initialises_and_handles_a_sample_event_with_only_what_ships(
    function: str,
    staged_artifact: Path,
    shipped_runtime: Runtime,
    handler_world: tuple[dict[str, str], Any, Path],
) -> None:
    env, seeds, work = handler_world
    # GIVEN the function's environment as template.yaml sets it, pointed at the test's moto and redis-server
    full_env = {**shipped_artifact.template_environment(FUNCTIONS[function]), **env, "REDIS_CLUSTER_MODE": "true"}
    process_env = shipped_artifact.process_environment(shipped_runtime, staged_artifact, {})
    # WHEN a fresh execution environment runs INIT and one invocation on Python 3.12 with only the artifact
    report = handler_runtime.run_handler(
        function,
        handler_runtime.events_for(function, seeds, 1, start=500),
        full_env,
        work,
        in_lambda=True,
        shipped=(str(shipped_runtime.python), process_env),
    )
    # THEN the invocation succeeded
    result = report.first["result"]
    assert _succeeded(function, result), json.dumps(result)[:2000]


def test_the_child_process_sees_only_the_artifact(staged_artifact: Path, shipped_runtime: Runtime) -> None:
    # GIVEN the environment a shipped process gets
    env = shipped_artifact.process_environment(shipped_runtime, staged_artifact, {})
    probe = (
        "import importlib.util, json, sys, shared;"
        "print(json.dumps([sys.version_info[:2], shared.__file__,"
        " [m for m in ('httpx', 'moto', 'pytest', 'fakeredis') if importlib.util.find_spec(m)]]))"
    )
    done = subprocess.run(
        [str(shipped_runtime.python), "-c", probe], env=env, cwd="/", capture_output=True, text=True, check=True
    )
    version, shared_file, test_only = json.loads(done.stdout)
    # THEN it runs the functions' Python, imports the staged code, and none of the test venv's packages is there
    assert version == [3, 12]
    assert shared_file.startswith(str(staged_artifact))
    assert test_only == []


def test_every_locked_runtime_package_has_a_wheel_for_the_functions_platform(staged_artifact: Path) -> None:
    # WHEN pip fetches the locked set for manylinux aarch64 and CPython 3.12, wheels only, hashes required
    problems = shipped_artifact.wheel_problems(
        staged_artifact / "requirements.txt", shipped_artifact.CACHE_ROOT / "ships-wheels-aarch64-cp312"
    )
    # THEN every package has one: an arm64 build never needs a compiler and never gets an x86 wheel
    assert problems is None, problems
