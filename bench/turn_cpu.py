"""CPU time of the streaming function per cold start and per user turn: ``python -m bench.turn_cpu``.

On Lambda a function's CPU share follows its memory size (1,769 MB is one vCPU), so the CPU the app needs per
start and per turn decides how small the function can be before the user waits for it. This measures that CPU:
a fresh instance of the streaming function is started exactly as Lambda starts it (``functions/agent_api/run.sh``,
:class:`tests.support.lambda_instance.Instance`) against a moto server (DynamoDB, EventBridge and SQS, one process
of its own, so its CPU is not the app's), a redis-server started here, and the scripted model server of
:mod:`bench.turn_scenario` pacing its tokens. The instance process's own CPU (``utime + stime`` of
``/proc/<pid>/stat``; ``run.sh`` execs uvicorn, so that is the whole app) is read:

- when ``/healthz`` first answers (what the Web Adapter waits for): the **cold start** (imports, ``create_app``,
  the lifespan's warm-up and connections);
- before and after each measured turn of :data:`~bench.turn_scenario.CYCLE` (a thread seeded with 60 messages,
  one unmeasured turn first): the **CPU per turn**, by kind;
- the **pre-model time** of the plain turns: from sending the request to the model request's arrival at the
  scripted server (same process, one monotonic clock), the part of the time to first text that is the app's;
- the peak resident memory (``VmHWM``) after the turns: the floor of the memory size.

The instance runs the shipped profiles, so the document search of the ``doc`` turns is refused by the tool gate
(and audited) instead of run: that turn's CPU is its refusal's, not a search's. Times are this machine's (x86,
shared); Lambda's arm64 vCPU is taken as equal to one of its cores, an assumption.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.stats import machine, markdown_table
from bench.turn_scenario import CYCLE, PLAIN, SEED_MESSAGES, TEXTS, ModelScript, run_body, user_text

TABLE = "bench-cpu"
REGION = "us-east-1"
TENANT = "tenant-cpu"
SECRET = "bench-cpu-secret-for-hs256-tokens-0123456789"
TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int) -> float:
    """CPU seconds of process ``pid`` so far: the sum over its threads of the scheduler's time on CPU
    (``/proc/<pid>/task/*/schedstat``, nanoseconds; ``/proc/<pid>/stat`` counts in 10 ms ticks, too coarse for
    a request). Threads that ended are not counted, hence :func:`process_cpu_ticks_s` for whole starts."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total / 1e9


def process_cpu_ticks_s(pid: int) -> float:
    """User plus system CPU seconds of process ``pid`` so far, ended threads included (10 ms ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def process_memory_mb(pid: int) -> tuple[float, float]:
    """(resident MB now, peak resident MB) of process ``pid``."""
    status = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line
    )
    return int(status["VmRSS"].split()[0]) / 1024, int(status["VmHWM"].split()[0]) / 1024


@dataclass
class CpuResult:
    first_chunk_delay_s: float
    chunk_delay_s: float
    cold_start_cpu_s: list[float] = field(default_factory=list)
    cold_start_wall_s: list[float] = field(default_factory=list)
    turn_cpu_s: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    pre_model_s: list[float] = field(default_factory=list)
    pre_model_cpu_s: list[float] = field(default_factory=list)
    rss_ready_mb: list[float] = field(default_factory=list)
    peak_rss_mb: list[float] = field(default_factory=list)

    def cpu_per_turn(self, mix: dict[str, float]) -> float:
        """Mean CPU seconds per turn, each kind weighted by its share of the traffic."""
        return sum(share * statistics.mean(self.turn_cpu_s[kind]) for kind, share in mix.items()
                   if self.turn_cpu_s.get(kind))

    def markdown(self) -> str:
        rows: list[list[Any]] = [
            ["cold start: CPU until /healthz answers", statistics.median(self.cold_start_cpu_s) * 1000,
             len(self.cold_start_cpu_s)],
            ["cold start: wall time until /healthz answers", statistics.median(self.cold_start_wall_s) * 1000,
             len(self.cold_start_wall_s)],
        ]
        for kind, values in self.turn_cpu_s.items():
            rows.append([f"CPU per {kind} turn", statistics.median(values) * 1000, len(values)])
        rows.append(["pre-model CPU of a plain turn", statistics.median(self.pre_model_cpu_s) * 1000,
                     len(self.pre_model_cpu_s)])
        rows.append(["pre-model time of a plain turn (wall, moto server)", statistics.median(self.pre_model_s) * 1000,
                     len(self.pre_model_s)])
        rows.append(["resident memory at /healthz (MB)", statistics.median(self.rss_ready_mb),
                     len(self.rss_ready_mb)])
        rows.append(["peak resident memory after the turns (MB)", max(self.peak_rss_mb), len(self.peak_rss_mb)])
        return "\n".join([
            f"machine: {machine()}; model: first chunk after {self.first_chunk_delay_s:g} s, "
            f"{self.chunk_delay_s * 1000:g} ms between chunks",
            "",
            markdown_table(["measure", "median (ms, or MB)", "n"], rows),
        ])


def _resources(endpoint: str) -> dict[str, str]:
    """The tables, the bus with its rule and the memory queue on the moto server; returns the instance's env."""
    import boto3

    from bench.turn_counts import BUS, create_resources

    for name, value in {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench"}.items():
        os.environ.setdefault(name, value)
    session = boto3.session.Session(region_name=REGION)
    idempotency = f"{TABLE}-idempotency"
    queue_url = create_resources(session, table=TABLE, idempotency_table=idempotency, endpoint_url=endpoint)
    return {
        "TABLE_NAME": TABLE, "IDEMPOTENCY_TABLE_NAME": idempotency, "AWS_REGION": REGION,
        "AWS_DEFAULT_REGION": REGION, "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
        "DYNAMODB_ENDPOINT_URL": endpoint, "AWS_ENDPOINT_URL": endpoint, "EVENT_BUS_NAME": BUS,
        "MEMORY_QUEUE_URL": queue_url, "AUTH_MODE": "hs256", "JWT_SECRET": SECRET, "LLM_MAX_RETRIES": "0",
    }


async def _seed(endpoint: str, thread_id: str, held: list[dict[str, str]]) -> None:
    from shared.adapters.aws.clients import client_factory
    from shared.adapters.aws.dynamodb_store import DynamoDBStore
    from shared.models import Identity, Message, Role

    store = DynamoDBStore(TABLE, client_factory("dynamodb", region=REGION, endpoint_url=endpoint))
    identity = Identity(tenant_id=TENANT, user_id=f"user-{thread_id}")
    await store.threads.open_thread(identity, thread_id)
    messages = []
    for i in range(SEED_MESSAGES // 2):
        messages.append(Message(id=f"{thread_id}-s{i}", thread_id=thread_id, role=Role.USER, content=TEXTS.seed_user))
        messages.append(Message(id=f"{thread_id}-a{i}", thread_id=thread_id, role=Role.ASSISTANT,
                                content=TEXTS.seed_answer))
        held.append({"id": f"{thread_id}-s{i}", "role": "user", "content": TEXTS.seed_user})
    await store.threads.append_messages(identity, thread_id, messages)


def _turn(client: httpx.Client, url: str, thread_id: str, run: int, held: list[dict[str, str]], kind: str,
          index: int) -> float:
    """One turn read to its end; returns when it was sent (monotonic)."""
    from shared.auth import mint_local_token

    run_id = f"{thread_id}-r{run}"
    message = {"id": f"{run_id}-u", "role": "user", "content": user_text(index, kind)}
    token = mint_local_token(SECRET, user_id=f"user-{thread_id}", tenant_id=TENANT)
    sent = time.monotonic()
    with client.stream("POST", f"{url}/api/v1/agent", json=run_body(thread_id, run_id, held, message),
                       headers={"Authorization": f"Bearer {token}"}) as resp:
        if resp.status_code != 200:
            raise RuntimeError(f"POST answered {resp.status_code}: {resp.read()[:300]!r}")
        last = ""
        for line in resp.iter_lines():
            if line.startswith("data:"):
                last = json.loads(line[5:])["type"]
    if last != "RUN_FINISHED":
        raise RuntimeError(f"run {run_id} ended with {last}")
    held.append(message)
    return sent


def measure(*, starts: int, cycles: int, first_chunk_delay_s: float = 0.1, chunk_delay_s: float = 0.01) -> CpuResult:
    import asyncio

    from tests.support.lambda_instance import Instance
    from tests.support.model_server import ModelServer
    from tests.support.moto_server import moto_server
    from tests.support.redis_server import redis_server

    result = CpuResult(first_chunk_delay_s, chunk_delay_s)
    arrivals: list[tuple[float, float]] = []  # (monotonic, the instance's CPU) at each worker model request
    current: dict[str, int] = {}

    def arrived() -> None:
        if "pid" in current:
            arrivals.append((time.monotonic(), process_cpu_s(current["pid"])))

    script = ModelScript(first_chunk_delay_s=first_chunk_delay_s, chunk_delay_s=chunk_delay_s,
                         on_worker_request=arrived)
    with moto_server() as endpoint, redis_server() as redis_url, ModelServer(script.respond) as model, \
            tempfile.TemporaryDirectory(prefix="bench-cpu-") as logs:
        env = {**_resources(endpoint), "REDIS_URL": redis_url, "LLM_BASE_URL": model.base_url, "LLM_API_KEY": "x"}
        for start in range(starts):
            launched = time.monotonic()
            instance = Instance(f"cpu-{start}", env, Path(logs))
            try:
                instance.wait_ready()
                pid = current["pid"] = instance.proc.pid
                result.cold_start_wall_s.append(time.monotonic() - launched)
                result.cold_start_cpu_s.append(process_cpu_ticks_s(pid))
                result.rss_ready_mb.append(process_memory_mb(pid)[0])
                thread_id = f"cpu-{uuid.uuid4().hex[:8]}"
                held: list[dict[str, str]] = []
                asyncio.run(_seed(endpoint, thread_id, held))
                with httpx.Client(timeout=120) as client:
                    run = 0
                    _turn(client, instance.url, thread_id, run, held, PLAIN, 0)  # unmeasured: first use
                    for _ in range(cycles):
                        for index, kind in enumerate(CYCLE):
                            run += 1
                            seen = len(arrivals)
                            before = process_cpu_s(pid)
                            sent = _turn(client, instance.url, thread_id, run, held, kind, index)
                            result.turn_cpu_s[kind].append(process_cpu_s(pid) - before)
                            if kind == PLAIN and len(arrivals) > seen:
                                at, cpu = arrivals[seen]
                                result.pre_model_s.append(at - sent)
                                result.pre_model_cpu_s.append(cpu - before)
                result.peak_rss_mb.append(process_memory_mb(pid)[1])
            finally:
                instance.stop()
    return result


def main(argv: Sequence[str] | None = None) -> CpuResult:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="one start, one cycle, fast model")
    parser.add_argument("--starts", type=int, default=3, help="fresh instances")
    parser.add_argument("--cycles", type=int, default=1, help="cycles of 8 turns on each instance")
    args = parser.parse_args(argv)
    if args.smoke:
        result = measure(starts=1, cycles=1, first_chunk_delay_s=0.01, chunk_delay_s=0.001)
    else:
        result = measure(starts=args.starts, cycles=args.cycles)
    print(result.markdown())
    return result


if __name__ == "__main__":
    main()
