"""A non-streaming Lambda function run as the Python runtime runs it: a fresh process imports the handler module
(the INIT phase, with ``AWS_LAMBDA_FUNCTION_NAME`` set as the runtime sets it), then invokes the handler once per
event. For INIT and for each invocation the process reports how long it took, which parts of the container's
``Services`` were built during it, and how many boto3 clients were created during it.

The child side is ``python -m tests.support.handler_runtime <job.json>``; the parent side is :func:`run_handler`.
The scenarios (a fire of the automation function, a run-completed record of the memory function, a proxy event of
the buffered API function, an operator's dry run of the migration function) are built by :func:`prepare` against a
moto server and a redis-server.
"""

from __future__ import annotations

import asyncio
import gc
import importlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
REGION = "us-east-1"
TABLE = "agent-handler-runtime"
IDEMPOTENCY_TABLE = "agent-handler-runtime-idempotency"
TENANT = "tenant-1"
USER = "user-1"
JWT_SECRET = "handler-runtime-secret-of-at-least-32-bytes"
HANDLERS = {
    "automation": "functions.automation.handler.handler",
    "memory": "functions.memory_extract.handler.handler",
    "buffered": "functions.agent_api.lambda_buffered.handler",
    "sweeper": "functions.agent_api.sweeper_handler.handler",
    "migrate": "functions.migrate.handler.handler",
    "background_run": "functions.background_run.handler.handler",
}
BACKGROUND_THREAD = "thread-background"


# ---- child: the runtime ----------------------------------------------------------------------------------------


@dataclass
class _Context:
    """The Lambda context object's fields the handlers read."""

    aws_request_id: str
    function_name: str = "agent-backend-emulated"
    memory_limit_in_mb: int = 1024
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:agent-backend-emulated"

    def get_remaining_time_in_millis(self) -> int:
        return 600_000


class _ClientCount:
    """Counts boto3 clients created (every boto3 client is made by ``botocore.session.Session.create_client``)."""

    def __init__(self) -> None:
        import botocore.session

        self.count = 0
        original = botocore.session.Session.create_client

        def counted(session: Any, *args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return original(session, *args, **kwargs)

        botocore.session.Session.create_client = counted  # type: ignore[method-assign,assignment]


_SERVICES: list[Any] = []


def _track_services() -> None:
    """Record every ``Services`` made from now on (a handler outside Lambda makes its own on first use)."""
    from shared.wiring import Services

    original = Services.__init__

    def tracked(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        _SERVICES.append(self)

    Services.__init__ = tracked  # type: ignore[method-assign]
    container = sys.modules.get("shared.container")
    made = getattr(container, "_services", None) if container else None
    if made is not None:
        _SERVICES.append(made)


def _built_parts() -> set[str]:
    """The ``Services`` members built so far in this process (a ``cached_property`` keeps its value in the
    instance dict), and ``services`` once a ``Services`` exists."""
    parts: set[str] = set()
    for services in _SERVICES:
        parts |= {"services", *(k for k in vars(services) if k not in ("settings", "overrides"))}
    return parts


def _child(job_path: str) -> None:
    job = json.loads(Path(job_path).read_text(encoding="utf-8"))
    clients = _ClientCount()
    module_name, _, attr = job["handler"].rpartition(".")
    before, t0 = clients.count, time.perf_counter()
    handler = getattr(importlib.import_module(module_name), attr)
    init_ms = (time.perf_counter() - t0) * 1000
    _track_services()  # outside the timed INIT: in a process outside Lambda it imports the wiring
    init = {
        "ms": init_ms,
        "clients": clients.count - before,
        "built": sorted(_built_parts()),
        "frozen": gc.get_freeze_count(),  # objects moved out of the collector's reach at the end of INIT
    }
    invocations = []
    for index, event in enumerate(job["events"]):
        parts, before, t0 = _built_parts(), clients.count, time.perf_counter()
        result = handler(event, _Context(aws_request_id=f"req-{index}"))
        invocations.append(
            {
                "ms": (time.perf_counter() - t0) * 1000,
                "clients": clients.count - before,
                "built": sorted(_built_parts() - parts),
                "result": result,
            }
        )
    print(json.dumps({"init": init, "invocations": invocations}, default=str))


# ---- parent ----------------------------------------------------------------------------------------------------


@dataclass
class RuntimeReport:
    init: dict[str, Any]
    invocations: list[dict[str, Any]]

    @property
    def first(self) -> dict[str, Any]:
        return self.invocations[0]


def run_handler(
    function: str,
    events: Sequence[Mapping[str, Any]],
    env: Mapping[str, str],
    work_dir: Path,
    *,
    in_lambda: bool,
    shipped: tuple[str, Mapping[str, str]] | None = None,
) -> RuntimeReport:
    """One fresh execution environment of ``function``: INIT, then every event in turn.

    By default the process is this test venv's Python on the repository. ``shipped`` is ``(python, environment)``
    of the deployed artifact instead (``tests/support/shipped_artifact.py``): that interpreter with only that
    environment, and this module run from a copy in ``work_dir``, so nothing of the repository or the test venv is
    importable."""
    job = work_dir / f"job-{function}-{time.monotonic_ns()}.json"
    job.write_text(json.dumps({"handler": HANDLERS[function], "events": list(events)}), encoding="utf-8")
    if shipped is None:
        python, base = sys.executable, {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        base["PYTHONPATH"] = str(REPO)
        command = [python, "-m", "tests.support.handler_runtime", str(job)]
    else:
        python, base = shipped[0], dict(shipped[1])
        child = work_dir / "lambda_runtime_child.py"
        child.write_text(Path(__file__).read_text(encoding="utf-8"), encoding="utf-8")
        command = [python, str(child), str(job)]
    full_env = {**base, **env}
    if in_lambda:
        full_env["AWS_LAMBDA_FUNCTION_NAME"] = f"agent-backend-{function}"
    else:
        full_env.pop("AWS_LAMBDA_FUNCTION_NAME", None)
    done = subprocess.run(
        command,
        cwd=REPO if shipped is None else work_dir,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{function} runtime failed:\n{done.stderr[-4000:]}")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    return RuntimeReport(report["init"], report["invocations"])


def environment(moto_url: str, redis_url: str, queue_url: str) -> dict[str, str]:
    """The functions' configuration as template.yaml sets it, pointed at the moto server and the redis-server."""
    return {
        "TABLE_NAME": TABLE,
        "IDEMPOTENCY_TABLE_NAME": IDEMPOTENCY_TABLE,
        "MEMORY_QUEUE_URL": queue_url,
        "AWS_REGION": REGION,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_ENDPOINT_URL": moto_url,
        "DYNAMODB_ENDPOINT_URL": moto_url,
        "REDIS_URL": redis_url,
        "AUTH_MODE": "hs256",
        "JWT_SECRET": JWT_SECRET,
        "POWERTOOLS_METRICS_NAMESPACE": "AgentBackendEmulated",
    }


def create_resources(moto_url: str) -> str:
    """The table, the idempotency table and the memory queue; returns the queue URL."""
    import boto3

    from shared.adapters.aws.table_schema import create_table

    dynamodb = boto3.client("dynamodb", region_name=REGION, endpoint_url=moto_url)
    create_table(dynamodb, TABLE)
    dynamodb.create_table(
        TableName=IDEMPOTENCY_TABLE,
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    sqs = boto3.client("sqs", region_name=REGION, endpoint_url=moto_url)
    url: str = sqs.create_queue(QueueName="agent-handler-runtime-memory")["QueueUrl"]
    return url


class _Scheduler:
    """Stands in for EventBridge Scheduler when the test creates its task (the fire is what is measured)."""

    async def create(self, task: Any) -> str:
        return f"arn:aws:scheduler:{REGION}:123456789012:schedule/default/{task.task_id}"

    async def update(self, task: Any) -> str:
        return await self.create(task)

    async def delete(self, task_id: str) -> None:
        return None


async def _seed(env: Mapping[str, str]) -> tuple[str, str]:
    """An automation task on a worker profile, and a thread with one user message; returns their ids."""
    from shared.automation.models import AutomationTaskSpec
    from shared.models import Identity, Message, Role
    from shared.settings import Settings
    from shared.wiring import ServiceOverrides, Services

    services = Services(Settings.from_env(env), overrides=ServiceOverrides(automation_scheduler=_Scheduler()))
    owner = Identity(tenant_id=TENANT, user_id=USER)
    spec = AutomationTaskSpec(name="Briefing", schedule_expression="rate(1 day)", prompt="Summarise my day.")
    task = await services.automation_service.create(owner, spec)
    thread = "thread-memory"
    await services.store.threads.open_thread(owner, thread)
    message = Message(id="m-user-1", thread_id=thread, role=Role.USER, content="I live in Lisbon.")
    await services.store.threads.append_messages(owner, thread, [message])
    await _queue_background_runs(services, owner)
    return task.task_id, thread


async def _queue_background_runs(services: Any, owner: Any) -> None:
    """Background runs queued on their thread as the API leaves them (``202``), one per event number a test may
    send (``background_event``): each drain starts the one queued for it."""
    from shared.models import utc_now
    from shared.ports.run_queue import QueuedRun

    for n in range(500, 503):
        message = {"id": f"u-bg-{n}", "role": "user", "content": "What time is it?"}
        body = {
            "threadId": BACKGROUND_THREAD,
            "runId": f"bg-{n}",
            "messages": [message],
            "tools": [],
            "context": [],
            "forwardedProps": {"background": True},
        }
        entry = QueuedRun(
            run_id=f"bg-{n}",
            user_id=owner.user_id,
            scopes=(),
            body=json.dumps(body).encode(),
            enqueued_at=utc_now(),
            waiter_until=0.0,
        )
        await services.run_queue.enqueue(owner.tenant_id, BACKGROUND_THREAD, entry, depth=10)


def prepare(moto_url: str, redis_url: str) -> tuple[dict[str, str], dict[str, list[dict[str, Any]]]]:
    """Resources, seed data and ``count`` events per function (each one new work, not a duplicate delivery)."""
    keys = ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
    saved = {k: os.environ.get(k) for k in keys}
    os.environ.update(dict(zip(keys, (moto_url, "testing", "testing"), strict=True)))
    try:
        env = environment(moto_url, redis_url, create_resources(moto_url))
        task_id, thread = asyncio.run(_seed(env))
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return env, {"task_id": [{"id": task_id}], "thread": [{"id": thread}]}


def automation_event(task_id: str, n: int) -> dict[str, Any]:
    """The Scheduler's input for fire ``n`` of the task (a new scheduled time: a new fire, not a retry)."""
    return {
        "taskId": task_id,
        "tenantId": TENANT,
        "userId": USER,
        "scheduledTime": f"2026-01-01T{n // 60:02d}:{n % 60:02d}:00Z",
        "executionId": f"exec-{n}",
        "attemptNumber": "1",
    }


def memory_event(thread: str, n: int) -> dict[str, Any]:
    """An SQS batch of one ``agent.run.completed`` record for the thread (a new event id each time)."""
    body = json.dumps(
        {
            "version": "0",
            "id": f"evt-{n}-{time.monotonic_ns()}",
            "detail-type": "agent.run.completed",
            "source": "agent-backend",
            "time": "2026-01-01T00:00:00Z",
            "region": REGION,
            "resources": [],
            "detail": {
                "tenantId": TENANT,
                "userId": USER,
                "threadId": thread,
                "runId": f"run-{n}",
                "executor": "worker",
                "status": "succeeded",
            },
        }
    )
    record = {
        "messageId": f"msg-{n}",
        "receiptHandle": "handle",
        "body": body,
        "attributes": {
            "ApproximateReceiveCount": "1",
            "SentTimestamp": "1767225600000",
            "SenderId": "AIDAIENQZJOLO23YVJ4VO",
            "ApproximateFirstReceiveTimestamp": "1767225600001",
        },
        "messageAttributes": {},
        "md5OfBody": "",
        "eventSource": "aws:sqs",
        "eventSourceARN": f"arn:aws:sqs:{REGION}:123456789012:agent-handler-runtime-memory",
        "awsRegion": REGION,
    }
    return {"Records": [record]}


def buffered_event() -> dict[str, Any]:
    """API Gateway's proxy (v1) event for ``GET /api/v1/threads`` with a valid token."""
    from shared.auth import mint_local_token

    token = mint_local_token(JWT_SECRET, tenant_id=TENANT, user_id=USER)
    events_dir = REPO / "tests" / "events"
    event: dict[str, Any] = json.loads((events_dir / "apigw_proxy_v1.json").read_text(encoding="utf-8"))
    headers = {"Host": "api.example.test", "Authorization": f"Bearer {token}"}
    event.update(
        {
            "httpMethod": "GET",
            "path": "/api/v1/threads",
            "resource": "/{proxy+}",
            "pathParameters": {"proxy": "api/v1/threads"},
            "queryStringParameters": None,
            "multiValueQueryStringParameters": None,
            "body": None,
            "isBase64Encoded": False,
            "headers": headers,
            "multiValueHeaders": {k: [v] for k, v in headers.items()},
        }
    )
    event["requestContext"]["httpMethod"] = "GET"
    event["requestContext"]["path"] = "/prod/api/v1/threads"
    return event


def sweeper_event(n: int) -> dict[str, Any]:
    """EventBridge's scheduled event, as the sweeper's schedule delivers it."""
    return {
        "version": "0",
        "id": f"sweep-{n}",
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": "123456789012",
        "time": "2026-01-01T00:00:00Z",
        "region": REGION,
        "resources": [f"arn:aws:events:{REGION}:123456789012:rule/agent-backend-sweeper"],
        "detail": {},
    }


def events_for(
    function: str, seeds: Mapping[str, list[dict[str, Any]]], count: int, *, start: int = 0
) -> list[dict[str, Any]]:
    """``count`` events for ``function``, numbered from ``start`` (so several environments never share a fire)."""
    numbers = range(start, start + count)
    if function == "automation":
        return [automation_event(seeds["task_id"][0]["id"], n) for n in numbers]
    if function == "memory":
        return [memory_event(seeds["thread"][0]["id"], n) for n in numbers]
    if function == "sweeper":
        return [sweeper_event(n) for n in numbers]
    if function == "migrate":  # an operator's dry run: scans the whole table, writes nothing
        return [{"action": "dry-run"} for _ in numbers]
    if function == "background_run":  # the API's asynchronous Invoke: drain the thread of the queued runs
        return [{"tenantId": TENANT, "threadId": BACKGROUND_THREAD} for _ in numbers]
    return [buffered_event() for _ in numbers]


if __name__ == "__main__":
    _child(sys.argv[1])
