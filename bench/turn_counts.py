"""What one user turn costs in requests, units and bytes, counted on a real run of the app: ``python -m
bench.turn_counts``.

The system as in the tests, all on loopback: the app (``create_app``, uvicorn, the real wiring and adapters: boto3
for DynamoDB, EventBridge and SQS, redis-py, the ``openai`` client) on moto in-process (DynamoDB tables as
template.yaml defines them, the event bus, its run-completed rule and the memory queue), a redis-server started
here on a free port, and the scripted model server behind a byte-counting proxy. The memory function's handler
(``MemoryExtractHandler``, Powertools batch and idempotency) takes the queue's messages as SQS records, as Lambda
delivers them. The traffic is :mod:`bench.turn_scenario`'s: the token benchmark's mix and sizes, on threads that
already hold 60 messages.

Each thread runs :data:`~bench.turn_scenario.CYCLE` in two bursts of four turns. After each turn the memory
function takes the turn's ``agent.run.completed`` message; the "extraction due" messages it schedules are kept
until the burst ends, then delivered in order: the first three find a later turn and stop ("superseded"), the last
one extracts (the coalescing rule of docs/memory.md with a quiet period of 0 s instead of 120 s, so nothing
waits). Every step is one **phase**, counted on its own:

- **DynamoDB**: requests by operation, read and write units and stored bytes, computed from item sizes by
  :mod:`bench.dynamo_meter` (moto's own consumed capacity is a constant), per partition kind;
- **Redis**: commands by name and bytes in and out, from ``INFO commandstats`` / ``INFO stats`` of the
  redis-server this run started (the cost of the ``INFO`` calls themselves measured and taken out), and at the end
  ``MEMORY USAGE`` and ``XLEN`` of every stream key, with its TTL;
- **the model**: requests and bytes each way through the proxy (what crosses the NAT gateway);
- **EventBridge and SQS**: events published (``PutEvents`` entries), messages sent to the queue (the rule's
  deliveries and the coalescer's ``SendMessage``), and every AWS request by service and operation.

Counts repeat exactly from run to run, except Redis's (a blocking read that times out, a health check) and the
stream sizes (entry ids are timestamps): ``--smoke`` runs one thread, the full run three, each one cycle (a
second cycle on the same thread reads a longer thread, so its turns differ a little), and
``tests/bench/test_capacity.py`` holds the capacity model's recorded figures to the smoke run's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import logging
import os
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import boto3
import httpx

from bench.dynamo_meter import DynamoMeter, DynamoTally, describe
from bench.stats import machine, markdown_table
from bench.turn_scenario import CYCLE, SEED_MESSAGES, TEXTS, ModelScript, catalog_with_documents, run_body, user_text
from tests.support.tcp_proxy import LoopbackProxy

TABLE = "bench-capacity"
IDEMPOTENCY_TABLE = "bench-capacity-idempotency"
BUS = "bench-capacity-events"
QUEUE = "bench-capacity-memory"
REGION = "us-east-1"
TENANT = "tenant-cap"
SECRET = "bench-capacity-secret-for-hs256-0123456789"
BURST = 4
PHASES = ("turn:plain", "turn:clock", "turn:doc", "run:heartbeat", "memory:run-completed",
          "memory:due-superseded", "memory:due-extraction")


@dataclass
class AwsCounter:
    """Every AWS call by ``service.Operation``; events published and messages sent to SQS."""

    calls: Counter[str] = field(default_factory=Counter)
    events: int = 0
    sqs_messages: int = 0
    enabled: bool = True

    def install(self, events: Any) -> None:
        events.register("provide-client-params", self._params)
        events.register("after-call", self._after)

    def _params(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        if not self.enabled:
            return
        if model.name == "PutEvents":
            self.events += len(params.get("Entries", []))
        elif model.name == "SendMessage":
            self.sqs_messages += 1
        elif model.name == "SendMessageBatch":
            self.sqs_messages += len(params.get("Entries", []))

    def _after(self, model: Any, **_: Any) -> None:
        if self.enabled:
            self.calls[f"{model.service_model.service_name}.{model.name}"] += 1

    def snapshot(self) -> tuple[Counter[str], int, int]:
        return Counter(self.calls), self.events, self.sqs_messages


@dataclass
class RedisSnapshot:
    commands: Counter[str]
    bytes_in: int
    bytes_out: int


class RedisStats:
    """``INFO`` deltas of the run's own redis-server, less the cost of asking (the replies of one snapshot, asked
    again right after the phase: ``INFO commandstats`` grows with every new command name)."""

    def __init__(self, url: str) -> None:
        import redis

        self._client = redis.Redis.from_url(url)

    def snapshot(self) -> RedisSnapshot:
        stats: Any = self._client.info("commandstats")
        net: Any = self._client.info("stats")
        commands = Counter({k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()})
        for own in ("info", "memory", "scan", "xlen", "ttl", "type"):
            commands.pop(own, None)
        return RedisSnapshot(commands, int(net["total_net_input_bytes"]), int(net["total_net_output_bytes"]))

    def delta(self, before: RedisSnapshot) -> RedisSnapshot:
        """What happened since ``before``, less one snapshot's own bytes."""
        after = self.snapshot()
        again = self.snapshot()
        return RedisSnapshot(
            after.commands - before.commands,
            after.bytes_in - before.bytes_in - (again.bytes_in - after.bytes_in),
            after.bytes_out - before.bytes_out - (again.bytes_out - after.bytes_out),
        )

    def streams(self) -> list[tuple[str, int, int, int]]:
        """Every stream key: (key, MEMORY USAGE bytes, XLEN, TTL seconds or -1)."""
        out = []
        for raw in self._client.scan_iter(count=1000):
            key = raw.decode()
            if self._client.type(key) != b"stream":
                continue
            usage: Any = self._client.memory_usage(key, samples=0)
            out.append((key, int(usage or 0), int(self._client.xlen(key)), int(self._client.ttl(key))))
        return out

    def close(self) -> None:
        self._client.close()


@dataclass
class Phase:
    """The sums over every occurrence of one phase."""

    occurrences: int = 0
    dynamo: DynamoTally = field(default_factory=DynamoTally)
    redis_commands: Counter[str] = field(default_factory=Counter)
    redis_in: int = 0
    redis_out: int = 0
    model_requests: int = 0
    model_sent: int = 0
    model_received: int = 0
    events: int = 0
    sqs_messages: int = 0
    aws_calls: Counter[str] = field(default_factory=Counter)
    wall_s: float = 0.0

    def figures(self) -> dict[str, float]:
        """Per occurrence, the figures the capacity model prices."""
        n = self.occurrences or 1
        sqs_calls = sum(v for k, v in self.aws_calls.items() if k.startswith("sqs."))
        return {
            "dynamodb requests": sum(self.dynamo.requests.values()) / n,
            "dynamodb transactions": self.dynamo.requests["TransactWriteItems"] / n,
            "dynamodb read units": self.dynamo.rru / n,
            "dynamodb write units": self.dynamo.wru / n,
            "dynamodb index write units": self.dynamo.index_wru / n,
            "dynamodb stored bytes": self.dynamo.stored_bytes / n,
            "redis commands": sum(self.redis_commands.values()) / n,
            "redis bytes in": self.redis_in / n,
            "redis bytes out": self.redis_out / n,
            "model requests": self.model_requests / n,
            "model bytes sent": self.model_sent / n,
            "model bytes received": self.model_received / n,
            "events published": self.events / n,
            "queue messages sent": self.sqs_messages / n,
            "sqs requests by the code": sqs_calls / n,
            "thread partition units": self._units_on(":T#*#TH#*") / n,
            # the thread list: GSI3 since migration 2 (thread items of the release before sat in GSI1)
            "user's threads index units": (
                self._units_on("/GSI3:T#*#U#*#THREADS") + self._units_on("/GSI1:T#*#U#*#THREADS")
            ) / n,
            "running-runs index units": self._units_on("/GSI2:RUNNING#*") / n,
        }

    def _units_on(self, suffix: str) -> float:
        """Read plus write units on the partitions of one kind (a suffix of ``table[/index]:pattern``)."""
        return float(sum(v for k, v in self.dynamo.units_by_pattern.items() if k.endswith(suffix)))


@dataclass
class StreamRetention:
    """What the streams hold once the measured runs are over (MEMORY USAGE, bytes)."""

    worker_run_stream_bytes: float = 0.0
    worker_run_stream_entries: float = 0.0
    memory_run_stream_bytes: float = 0.0
    control_stream_bytes: float = 0.0
    thread_stream_bytes_per_entry: float = 0.0
    thread_entries_per_turn: float = 0.0
    run_stream_ttl_s: int = 0
    thread_stream_ttl_s: int = 0

    def figures(self) -> dict[str, float]:
        return {
            "worker run stream bytes": self.worker_run_stream_bytes,
            "worker run stream entries": self.worker_run_stream_entries,
            "memory run stream bytes": self.memory_run_stream_bytes,
            "control stream bytes": self.control_stream_bytes,
            "thread stream bytes per entry": self.thread_stream_bytes_per_entry,
            "thread stream entries per turn": self.thread_entries_per_turn,
        }


@dataclass
class TurnCounts:
    threads: int
    cycles: int
    phases: dict[str, Phase]
    retention: StreamRetention
    hottest: dict[str, tuple[str, float]]
    seconds: float

    def figures(self) -> dict[str, dict[str, float]]:
        out = {name: phase.figures() for name, phase in self.phases.items()}
        out["streams"] = self.retention.figures()
        return out

    def markdown(self) -> str:
        names = list(self.phases)
        keys = list(next(iter(self.phases.values())).figures())
        rows = [[key, *[self.phases[n].figures()[key] for n in names]] for key in keys]
        rows.append(["occurrences", *[self.phases[n].occurrences for n in names]])
        rows.append(["hottest partition (its units in one occurrence)", *[
            f"{self.hottest[n][0]} {self.hottest[n][1]:.1f}" for n in names
        ]])
        retention = self.retention
        lines = [
            f"machine: {machine()}; moto in-process, redis-server, scripted model; {self.threads} thread(s) x "
            f"{self.cycles} cycle(s) of {len(CYCLE)} turns, {SEED_MESSAGES} messages stored before",
            "",
            markdown_table(["per occurrence", *names], rows),
            "",
            "Streams after the runs (MEMORY USAGE):",
            "",
            markdown_table(
                ["stream", "bytes", "entries", "TTL"],
                [
                    ["worker run stream (per run)", retention.worker_run_stream_bytes,
                     retention.worker_run_stream_entries, f"{retention.run_stream_ttl_s} s"],
                    ["memory run stream (per run)", retention.memory_run_stream_bytes, "", ""],
                    ["run control stream (per run)", retention.control_stream_bytes, "", ""],
                    ["thread stream, per entry", retention.thread_stream_bytes_per_entry,
                     f"{retention.thread_entries_per_turn:.1f} per turn",
                     "none" if retention.thread_stream_ttl_s < 0 else f"{retention.thread_stream_ttl_s} s"],
                ],
            ),
            "",
            "DynamoDB units (reads and writes) by partition kind and by operation, per occurrence:",
            "",
        ]
        for name in names:
            phase = self.phases[name]
            ranked = sorted(phase.dynamo.units_by_pattern.items(), key=lambda item: -item[1])
            units = ", ".join(f"{k} {v / max(1, phase.occurrences):.1f}" for k, v in ranked)
            by_op = sorted(phase.dynamo.units_by_op.items(), key=lambda item: -item[1])
            ops = ", ".join(f"{k} {v / max(1, phase.occurrences):.1f}" for k, v in by_op)
            lines.append(f"- {name}: {units}; by operation: {ops}")
        lines += ["", "Redis commands by name, per occurrence:", ""]
        for name in names:
            phase = self.phases[name]
            ranked = sorted(phase.redis_commands.items(), key=lambda item: -item[1])
            lines.append(f"- {name}: " + (", ".join(f"{k} {v / max(1, phase.occurrences):.1f}" for k, v in ranked)
                                          or "none"))
        lines += ["", f"({self.seconds:.1f} s)"]
        return "\n".join(lines)


@dataclass
class FakeLambdaContext:
    function_name: str = "memory-extract"
    memory_limit_in_mb: int = 512
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:memory-extract"
    aws_request_id: str = "bench"

    def get_remaining_time_in_millis(self) -> int:
        return 300_000


def sqs_record(message: dict[str, Any]) -> dict[str, Any]:
    """A received SQS message as Lambda's event source mapping delivers it."""
    return {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": {
            "ApproximateReceiveCount": "1",
            "SentTimestamp": "1767225600000",
            "SenderId": "AIDAIENQZJOLO23YVJ4VO",
            "ApproximateFirstReceiveTimestamp": "1767225600001",
        },
        "messageAttributes": {},
        "md5OfBody": message["MD5OfBody"],
        "eventSource": "aws:sqs",
        "eventSourceARN": f"arn:aws:sqs:{REGION}:123456789012:{QUEUE}",
        "awsRegion": REGION,
    }


class Reports(logging.Handler):
    """The memory handler's report of each record (``status`` / ``reason``), from its log."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.reports: list[tuple[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage() == "memory extraction":
            self.reports.append((str(getattr(record, "status", "")), str(getattr(record, "reason", ""))))


class Harness:
    """The running system and its meters; ``phase(name)`` counts what happens inside it."""

    def __init__(self, meter: DynamoMeter, aws: AwsCounter, redis_stats: RedisStats, proxy: LoopbackProxy,
                 model_requests: Any) -> None:
        self.meter, self.aws, self.redis, self.proxy = meter, aws, redis_stats, proxy
        self._model_requests = model_requests
        self.phases: dict[str, Phase] = {name: Phase() for name in PHASES}
        self.hottest: dict[str, tuple[str, float]] = dict.fromkeys(PHASES, ("", 0.0))

    def metering(self, on: bool) -> None:
        self.meter.enabled = self.aws.enabled = on

    @contextmanager
    def phase(self) -> Iterator[dict[str, str]]:
        """Counts the block into the phase whose name the block puts in ``slot["name"]`` (known only after)."""
        slot: dict[str, str] = {}
        dynamo, redis_before = self.meter.snapshot(), self.redis.snapshot()
        calls, events, messages = self.aws.snapshot()
        sent, received, _ = self.proxy.snapshot()
        requests, started = self._model_requests(), time.perf_counter()
        yield slot
        wall = time.perf_counter() - started
        phase = self.phases[slot["name"]]
        spent = self.meter.snapshot().minus(dynamo)
        redis = self.redis.delta(redis_before)
        calls_after, events_after, messages_after = self.aws.snapshot()
        sent_after, received_after, _ = self.proxy.snapshot()
        phase.occurrences += 1
        phase.dynamo = phase.dynamo.plus(spent)
        phase.redis_commands += redis.commands
        phase.redis_in += redis.bytes_in
        phase.redis_out += redis.bytes_out
        phase.model_requests += self._model_requests() - requests
        phase.model_sent += sent_after - sent
        phase.model_received += received_after - received
        phase.events += events_after - events
        phase.sqs_messages += messages_after - messages
        phase.aws_calls += calls_after - calls
        phase.wall_s += wall
        hot = spent.hottest  # the partition that took the most units in this one occurrence
        if hot[1] > self.hottest[slot["name"]][1]:
            self.hottest[slot["name"]] = hot


# ---------------------------------------------------------------------------------------------------------------
# the run
# ---------------------------------------------------------------------------------------------------------------


def _aws_environment() -> None:
    for name, value in {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
                        "AWS_DEFAULT_REGION": REGION}.items():
        os.environ.setdefault(name, value)


def create_resources(
    session: Any, *, table: str = TABLE, idempotency_table: str = IDEMPOTENCY_TABLE, endpoint_url: str | None = None
) -> str:
    """The tables, the bus with its run-completed rule and the memory queue, as template.yaml defines them;
    returns the queue's URL."""
    from shared.adapters.aws.table_schema import create_table
    from shared.memory.trigger import EVENT_SOURCE, MEMORY_DETAIL_TYPES

    dynamodb = session.client("dynamodb", region_name=REGION, endpoint_url=endpoint_url)
    create_table(dynamodb, table)
    dynamodb.create_table(
        TableName=idempotency_table,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
    )
    sqs = session.client("sqs", region_name=REGION, endpoint_url=endpoint_url)
    events = session.client("events", region_name=REGION, endpoint_url=endpoint_url)
    queue_url: str = sqs.create_queue(QueueName=QUEUE)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    events.create_event_bus(Name=BUS)
    events.put_rule(
        Name="run-completed", EventBusName=BUS,
        EventPattern=json.dumps({"source": [EVENT_SOURCE], "detail-type": list(MEMORY_DETAIL_TYPES)}),
    )
    events.put_targets(Rule="run-completed", EventBusName=BUS, Targets=[{"Id": "memory", "Arn": arn}])
    return queue_url


def _services(settings: Any) -> Any:
    from shared.profiles import MEMORY_TOOL_NAMES
    from shared.wiring import ServiceOverrides, Services

    plain = Services(settings)
    catalog = catalog_with_documents(plain.tools.names | MEMORY_TOOL_NAMES)
    return Services(settings, overrides=ServiceOverrides(profiles=catalog))


@dataclass
class Thread:
    thread_id: str
    held: list[dict[str, str]] = field(default_factory=list)
    runs: int = 0


async def _seed(thread: Thread) -> None:
    """``SEED_MESSAGES`` stored messages (user and answer in turn), as a returning user's thread holds."""
    from shared.adapters.aws.clients import client_factory
    from shared.adapters.aws.dynamodb_store import DynamoDBStore
    from shared.models import Identity, Message, Role

    store = DynamoDBStore(TABLE, client_factory("dynamodb", region=REGION))
    identity = Identity(tenant_id=TENANT, user_id=f"user-{thread.thread_id}")
    await store.threads.open_thread(identity, thread.thread_id)
    messages = []
    for i in range(SEED_MESSAGES // 2):
        user_id = f"{thread.thread_id}-s{i:03d}"
        messages.append(Message(id=user_id, thread_id=thread.thread_id, role=Role.USER, content=TEXTS.seed_user))
        messages.append(Message(id=f"{thread.thread_id}-a{i:03d}", thread_id=thread.thread_id,
                                role=Role.ASSISTANT, content=TEXTS.seed_answer))
        thread.held.append({"id": user_id, "role": "user", "content": TEXTS.seed_user})
    await store.threads.append_messages(identity, thread.thread_id, messages)


def _turn(client: httpx.Client, thread: Thread, kind: str, index: int) -> None:
    """One user turn: ``POST /api/v1/agent``, the stream read to its end."""
    from shared.auth import mint_local_token

    thread.runs += 1
    run_id = f"{thread.thread_id}-r{thread.runs:03d}"
    message = {"id": f"{run_id}-u", "role": "user", "content": user_text(index, kind)}
    token = mint_local_token(SECRET, user_id=f"user-{thread.thread_id}", tenant_id=TENANT)
    body = run_body(thread.thread_id, run_id, thread.held, message)
    types: list[str] = []
    with client.stream("POST", "/api/v1/agent", json=body, headers={"Authorization": f"Bearer {token}"}) as resp:
        if resp.status_code != 200:
            raise RuntimeError(f"POST answered {resp.status_code}: {resp.read()[:300]!r}")
        for line in resp.iter_lines():
            if line.startswith("data:"):
                types.append(json.loads(line[5:])["type"])
    if not types or types[-1] != "RUN_FINISHED":
        raise RuntimeError(f"run {run_id} ended with {types[-3:]}")
    thread.held.append(message)


class MemoryQueue:
    """Takes the queue's messages and hands them to the memory handler, one record per invocation."""

    def __init__(self, sqs: Any, queue_url: str, handler: Any, reports: Reports) -> None:
        self._sqs, self._url, self._handler, self._reports = sqs, queue_url, handler, reports
        self.held_dues: list[dict[str, Any]] = []

    def receive(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        while messages := self._sqs.receive_message(QueueUrl=self._url, MaxNumberOfMessages=10).get("Messages", []):
            for message in messages:
                self._sqs.delete_message(QueueUrl=self._url, ReceiptHandle=message["ReceiptHandle"])
                out.append(message)
        return out

    def deliver(self, message: dict[str, Any]) -> tuple[str, str]:
        before = len(self._reports.reports)
        response = self._handler.handle({"Records": [sqs_record(message)]}, FakeLambdaContext())
        if response.get("batchItemFailures"):
            raise RuntimeError(f"the memory handler failed a record: {response}")
        return self._reports.reports[before] if len(self._reports.reports) > before else ("", "")


def is_run_completed(message: dict[str, Any]) -> bool:
    return "detail-type" in json.loads(message["Body"])


def _drive(harness: Harness, client: httpx.Client, queue: MemoryQueue, threads: list[Thread], cycles: int) -> None:
    for thread in threads:
        for _ in range(cycles):
            for start in range(0, len(CYCLE), BURST):
                for index in range(start, start + BURST):
                    kind = CYCLE[index]
                    with harness.phase() as slot:
                        _turn(client, thread, kind, index)
                        slot["name"] = f"turn:{kind}"
                    while messages := queue.receive():  # the turn's event, then the due message it schedules
                        for message in messages:
                            if not is_run_completed(message):
                                queue.held_dues.append(message)
                                continue
                            with harness.phase() as slot:
                                status, reason = queue.deliver(message)
                                slot["name"] = "memory:run-completed"
                            if status != "scheduled":
                                raise RuntimeError(f"a run-completed record did not schedule: {status} {reason}")
                dues, queue.held_dues = queue.held_dues, []
                for position, message in enumerate(dues):
                    with harness.phase() as slot:
                        status, reason = queue.deliver(message)
                        slot["name"] = "memory:due-extraction" if status == "extracted" else "memory:due-superseded"
                    expected = position == len(dues) - 1
                    if (status == "extracted") != expected:
                        raise RuntimeError(f"due message {position + 1} of {len(dues)}: {status} {reason}")
        with harness.phase() as slot:  # what a run pays every run_heartbeat_s (10 s): the lease renewed
            asyncio.run(_heartbeat(thread))
            slot["name"] = "run:heartbeat"


async def _heartbeat(thread: Thread) -> None:
    from shared.adapters.aws.clients import client_factory
    from shared.adapters.aws.dynamodb_store import DynamoDBStore

    store = DynamoDBStore(TABLE, client_factory("dynamodb", region=REGION))
    await store.runs.heartbeat(TENANT, f"{thread.thread_id}-r{thread.runs:03d}", last_stream_id="1796202172956-0")


def _retention(stats: RedisStats, thread_entries_before: dict[str, int], turns: int) -> StreamRetention:
    worker: list[tuple[int, int]] = []
    memory: list[int] = []
    control: list[int] = []
    thread_bytes = thread_entries = added = 0
    run_ttl = thread_ttl = -1
    for key, usage, length, ttl in stats.streams():
        if key.startswith("thread:"):
            thread_bytes += usage
            thread_entries += length
            added += length - thread_entries_before.get(key, 0)
            thread_ttl = ttl
        elif key.endswith(":control"):
            control.append(usage)
        elif "/mem_" in key:
            memory.append(usage)
        elif "-r" in key.rsplit("/", 1)[-1]:
            worker.append((usage, length))
            run_ttl = max(run_ttl, ttl)
    return StreamRetention(
        worker_run_stream_bytes=sum(u for u, _ in worker) / max(1, len(worker)),
        worker_run_stream_entries=sum(n for _, n in worker) / max(1, len(worker)),
        memory_run_stream_bytes=sum(memory) / max(1, len(memory)),
        control_stream_bytes=sum(control) / max(1, len(control)),
        thread_stream_bytes_per_entry=thread_bytes / max(1, thread_entries),
        thread_entries_per_turn=added / max(1, turns),
        run_stream_ttl_s=run_ttl,
        thread_stream_ttl_s=thread_ttl,
    )


def _meters(raw: Any) -> tuple[DynamoMeter, AwsCounter]:
    """The meters, installed on the default boto3 session (where the app's clients come from) before any client."""
    reader = raw.client("dynamodb")
    meter = DynamoMeter(reader, [describe(reader, TABLE), describe(reader, IDEMPOTENCY_TABLE)])
    aws = AwsCounter()
    events = boto3.DEFAULT_SESSION.events  # type: ignore[union-attr]
    meter.install(events)
    aws.install(events)
    return meter, aws


def _settings(redis_url: str, model_url: str, queue_url: str) -> Any:
    from shared.settings import Settings

    return Settings(
        table_name=TABLE, idempotency_table_name=IDEMPOTENCY_TABLE, aws_region=REGION, redis_url=redis_url,
        llm_base_url=model_url, llm_api_key="bench", jwt_secret=SECRET, event_bus_name=BUS,
        memory_queue_url=queue_url, memory_idle_s=0, tool_plugins="bench.turn_scenario:DOCUMENT_TOOL",
    )


def _warm_up(client: httpx.Client, queue: MemoryQueue, pool: list[Thread]) -> None:
    """Seed each thread and run one unmeasured turn: connections opened, and the seeded messages extracted (6 or
    more user messages pending: at once), so the measured bursts start from an extraction as in steady use."""
    for thread in pool:
        asyncio.run(_seed(thread))
        _turn(client, thread, CYCLE[0], 0)
        while messages := queue.receive():
            for message in messages:
                queue.deliver(message)


@contextmanager
def _process_state(reports: Reports) -> Iterator[None]:
    """One request at a time into moto, the handler's reports captured; the process as it was afterwards (a test
    process goes on): no metered default session, no lock it lacked, the handler's logger as it was."""
    from shared.adapters.aws.clients import call_lock, serialise_calls

    _aws_environment()
    serialised_before, session_before = call_lock() is not None, boto3.DEFAULT_SESSION
    handler_log = logging.getLogger("functions.memory_extract.handler")
    level_before = handler_log.level
    serialise_calls(True)  # moto in-process is not thread-safe: one request at a time, as in `make dev`
    handler_log.addHandler(reports)
    handler_log.setLevel(logging.INFO)
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # the app prints one EMF metrics line per run
            yield
    finally:
        boto3.DEFAULT_SESSION = session_before
        if not serialised_before:
            serialise_calls(False)
        handler_log.removeHandler(reports)
        handler_log.setLevel(level_before)


def measure(*, threads: int, cycles: int, chunk_delay_s: float = 0.002) -> TurnCounts:
    """Seed ``threads`` threads, warm each with one unmeasured turn (and the extraction of its seeded messages),
    then count ``cycles`` cycles of :data:`CYCLE` on each."""
    from moto import mock_aws

    from functions.memory_extract.handler import MemoryExtractHandler
    from tests.support.live_app import serve_app
    from tests.support.model_server import ModelServer
    from tests.support.redis_server import redis_server

    started = time.perf_counter()
    reports = Reports()
    script = ModelScript(chunk_delay_s=chunk_delay_s)
    with _process_state(reports), mock_aws(), redis_server() as redis_url, ModelServer(script.respond) as model:
        boto3.setup_default_session(region_name=REGION)  # the app's clients come from this session
        raw = boto3.session.Session(region_name=REGION)  # the bench's own calls: never metered
        queue_url = create_resources(raw)
        meter, aws = _meters(raw)
        port = int(model.base_url.rsplit(":", 1)[1].split("/", 1)[0])
        with LoopbackProxy("127.0.0.1", port) as proxy:
            settings = _settings(redis_url, f"http://127.0.0.1:{proxy.port}/v1", queue_url)
            redis_stats = RedisStats(redis_url)
            harness = Harness(meter, aws, redis_stats, proxy, lambda: len(model.requests))
            # As template.yaml sets it for the memory function (the API keeps the default, 2): a connection the
            # model server closed as it was reused is retried, as deployed.
            handler = MemoryExtractHandler(_services(settings.model_copy(update={"llm_max_retries": 1})))
            handler.warm()
            queue = MemoryQueue(raw.client("sqs"), queue_url, handler, reports)
            try:
                with serve_app(_services(settings)) as url, httpx.Client(base_url=url, timeout=60) as client:
                    harness.metering(False)
                    pool = [Thread(f"cap-t{i}-{uuid.uuid4().hex[:6]}") for i in range(threads)]
                    _warm_up(client, queue, pool)
                    before = {k: n for k, _, n, _ in redis_stats.streams() if k.startswith("thread:")}
                    harness.metering(True)
                    _drive(harness, client, queue, pool, cycles)
                    harness.metering(False)
                    retention = _retention(redis_stats, before, threads * cycles * len(CYCLE))
            finally:
                handler.close()
                redis_stats.close()
    return TurnCounts(threads, cycles, harness.phases, retention, harness.hottest, time.perf_counter() - started)


def main(argv: list[str] | None = None) -> TurnCounts:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="one thread, one cycle (8 turns)")
    parser.add_argument("--threads", type=int, default=3)
    parser.add_argument("--cycles", type=int, default=1, help="cycles per thread (the recorded figures: 1)")
    parser.add_argument("--json", default="", help="also write the per-occurrence figures to this JSON file")
    args = parser.parse_args(argv)
    threads, cycles = (1, 1) if args.smoke else (args.threads, args.cycles)
    counts = measure(threads=threads, cycles=cycles)
    print(counts.markdown())
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(counts.figures(), out, indent=1)
    return counts


if __name__ == "__main__":
    main()
