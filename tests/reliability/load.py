"""Bounded load on loopback: a fixed number of concurrent SSE runs for a fixed time, then it stops by itself.

uvicorn serves the app (moto for DynamoDB, a real redis-server, the real ``openai`` client against the scripted
model server, which streams its answers in small chunks). Each worker posts a run on a thread of its own, reads the
stream to its end, then replays the run's stored events and compares: an event the replay has and the live stream
lacks is **lost**, an id seen twice is **duplicated**, an id not greater than the one before is **out of order**, and
a stream without exactly one terminal event at its end (or a non-200) is an **error**. All four must be 0. It also
reports throughput and the p95 time to first event (from sending the request to the first SSE event).

Full configuration (about a minute)::

    .venv/bin/python -m tests.reliability.load --concurrency 32 --seconds 60

``make test`` runs a short configuration (``tests/reliability/test_load.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

import boto3
import httpx
from moto import mock_aws

from shared.adapters.aws.dynamodb_store import DynamoDBStore
from shared.adapters.aws.table_schema import create_table
from shared.auth import mint_local_token
from shared.settings import Settings
from shared.wiring import ServiceOverrides, Services
from tests.support.live_app import serve_app
from tests.support.model_server import ModelServer, ScriptedTurn
from tests.support.moto_lock import OneRequestAtATime
from tests.support.redis_server import redis_server
from tests.support.sse import iter_sse_frames

SECRET = "load-test-secret-for-hs256-0123456789"
TABLE = "agent-load"
REGION = "us-east-1"
WORDS = 12


@dataclass
class LoadReport:
    concurrency: int
    seconds: float
    runs: int = 0
    events: int = 0
    lost: int = 0
    duplicated: int = 0
    out_of_order: int = 0
    errors: int = 0
    elapsed_s: float = 0.0
    ttfe_ms: list[float] = field(default_factory=list, repr=False)
    problems: list[str] = field(default_factory=list)

    @property
    def p95_ttfe_ms(self) -> float:
        if len(self.ttfe_ms) < 2:
            return self.ttfe_ms[0] if self.ttfe_ms else 0.0
        return statistics.quantiles(self.ttfe_ms, n=20, method="inclusive")[18]

    @property
    def runs_per_s(self) -> float:
        return self.runs / self.elapsed_s if self.elapsed_s else 0.0

    @property
    def events_per_s(self) -> float:
        return self.events / self.elapsed_s if self.elapsed_s else 0.0

    @property
    def clean(self) -> bool:
        return self.runs > 0 and not (self.lost or self.duplicated or self.out_of_order or self.errors)

    def summary(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("ttfe_ms")
        data["problems"] = self.problems[:10]
        data.update(
            p95_ttfe_ms=round(self.p95_ttfe_ms, 1),
            median_ttfe_ms=round(statistics.median(self.ttfe_ms), 1) if self.ttfe_ms else 0.0,
            runs_per_s=round(self.runs_per_s, 2),
            events_per_s=round(self.events_per_s, 1),
            elapsed_s=round(self.elapsed_s, 2),
        )
        return data


def _entry_key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def streamed_answer(_body: dict[str, Any]) -> ScriptedTurn:
    return ScriptedTurn(text=[f"w{i} " for i in range(WORDS)], chunk_delay_s=0.005)


async def _one_run(client: httpx.AsyncClient, headers: dict[str, str], thread: str, report: LoadReport) -> None:
    payload = {"threadId": thread, "runId": f"{thread}-r", "messages": [{"id": "u-1", "role": "user", "content": "go"}]}
    sent = time.monotonic()
    live: list[tuple[str, dict[str, Any]]] = []
    async with client.stream("POST", "/api/v1/agent", json=payload, headers=headers) as resp:
        if resp.status_code != 200:
            report.errors += 1
            report.problems.append(f"{thread}: HTTP {resp.status_code}")
            return
        async for frame in iter_sse_frames(resp):
            if frame.data is None:
                continue
            if not live:
                report.ttfe_ms.append((time.monotonic() - sent) * 1000)
            live.append((frame.id or "", frame.json()))
    replay = await client.get(f"/api/v1/agent/runs/{thread}-r/events", headers=headers)
    stored = [line[4:] for line in replay.text.split("\n") if line.startswith("id: ")]
    ids = [entry_id for entry_id, _ in live]
    report.runs += 1
    report.events += len(live)
    report.duplicated += len(ids) - len(set(ids))
    report.out_of_order += sum(1 for a, b in itertools.pairwise(ids) if _entry_key(b) <= _entry_key(a))
    report.lost += len(set(stored) - set(ids))
    types = [event["type"] for _, event in live]
    terminals = sum(t in ("RUN_FINISHED", "RUN_ERROR") for t in types)
    text = "".join(e.get("delta", "") for _, e in live if e["type"] == "TEXT_MESSAGE_CONTENT")
    if terminals != 1 or types[-1] != "RUN_FINISHED" or text != "".join(f"w{i} " for i in range(WORDS)):
        report.errors += 1
        report.problems.append(f"{thread}: terminals={terminals} last={types[-1] if types else None}")


async def drive(url: str, concurrency: int, seconds: float) -> LoadReport:
    """``concurrency`` workers start runs back to back until ``seconds`` have passed, then finish their run."""
    report = LoadReport(concurrency=concurrency, seconds=seconds)
    headers = {"Authorization": f"Bearer {mint_local_token(SECRET, user_id='load', tenant_id='load')}"}
    started = time.monotonic()
    deadline = started + seconds
    limits = httpx.Limits(max_connections=concurrency * 2, max_keepalive_connections=concurrency * 2)

    async def worker(index: int) -> None:
        n = 0
        while time.monotonic() < deadline:
            n += 1
            try:
                await _one_run(client, headers, f"load-{index}-{n}", report)
            except (httpx.HTTPError, ValueError) as exc:
                report.errors += 1
                report.problems.append(f"load-{index}-{n}: {type(exc).__name__}: {exc}")

    async with httpx.AsyncClient(base_url=url, timeout=30, limits=limits) as client:
        # Stops by itself: no new run after the deadline, and a hard cap for the runs in flight.
        async with asyncio.timeout(seconds + 60):
            await asyncio.gather(*(worker(i) for i in range(concurrency)))
    report.elapsed_s = time.monotonic() - started
    return report


@contextmanager
def loopback_system(redis_url: str | None = None) -> Iterator[str]:
    """The app on uvicorn with moto, a redis-server (started here unless given) and the scripted model server."""
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}.items():
        os.environ.setdefault(name, value)
    with mock_aws(), ModelServer(streamed_answer) as model:
        client = boto3.client("dynamodb", region_name=REGION)
        create_table(client, TABLE)
        locked = OneRequestAtATime(client)
        store = DynamoDBStore(TABLE, lambda: locked)
        with _redis(redis_url) as url_of_redis:
            settings = Settings(
                table_name=TABLE,
                aws_region=REGION,
                jwt_secret=SECRET,
                redis_url=url_of_redis,
                llm_base_url=model.base_url,
                llm_api_key="load",
                sse_ping_interval_s=5.0,
            )
            with serve_app(Services(settings, overrides=ServiceOverrides(store=store))) as url:
                yield url


@contextmanager
def _redis(url: str | None) -> Iterator[str]:
    if url is not None:
        yield url
        return
    with redis_server() as started:
        yield started


def run_load(concurrency: int, seconds: float, *, redis_url: str | None = None) -> LoadReport:
    with loopback_system(redis_url) as url:
        return asyncio.run(drive(url, concurrency, seconds))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args(argv)
    report = run_load(args.concurrency, args.seconds)
    print(json.dumps(report.summary(), indent=2))
    return 0 if report.clean else 1


if __name__ == "__main__":
    sys.exit(main())
