"""Server overhead of ``POST /api/v1/agent`` against a bare FastAPI SSE pass-through of the same model stream:
``python -m bench.server_overhead``.

Four processes on loopback: the scripted model server (fixed delays), ``ours`` (the real app, moto, a real
redis-server started here on a free port, the real ``openai`` adapter) and ``bare`` (one ``openai`` streaming call
forwarded as SSE), all three under uvicorn with the same settings (see ``bench/overhead_servers.py``), and this
client. For each concurrency, rounds alternate between ours and bare (ours first on even rounds, bare first on
odd ones); within a round, ``concurrency`` requests start together. Each request is a new thread with one user
message, so ours runs its whole path: admission (run ledger, thread claim, message append), the worker (window,
prompt, model call), events through the Redis stream, and the response tailing that stream.

Per request, measured from just before the request is sent:

- **TTFE**: the first SSE event. For ours that is ``RUN_STARTED``, written *before* the model is called, so it
  says little; for bare it is the first model delta.
- **TTFT**: the first text (ours: ``TEXT_MESSAGE_CONTENT``; bare: the first delta). The fair comparison.
- **total**: until the stream ends (ours: after ``RUN_FINISHED``; bare: after ``[DONE]``).
- **pre-model**: until the model server received the request (the same monotonic clock across processes).

A second pass (``--breakdown``, on by default) repeats the ours-only runs with the store and stream wrapped in
timers and the event loop under cProfile, and prints where ours spends its time. The whole benchmark is bounded
(fixed request counts, 30 s timeouts) and stops every process it started.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.overhead_servers import JWT_SECRET
from bench.stats import machine, markdown_table, percentile
from shared.auth import mint_local_token
from tests.support.redis_server import redis_server

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Sample:
    ttfe: float
    ttft: float
    total: float
    pre_model: float | None = None


@dataclass
class Series:
    samples: list[Sample] = field(default_factory=list)
    errors: int = 0

    def values(self, name: str) -> list[float]:
        return [getattr(s, name) for s in self.samples if getattr(s, name) is not None]


@dataclass
class OverheadResult:
    config: dict[str, Any]
    series: dict[tuple[str, int], Series]
    breakdown: dict[int, dict[str, Any]] = field(default_factory=dict)
    cpu_s: dict[str, float] = field(default_factory=dict)
    """CPU time (user + system) each server process used during the whole pass, warm-up included."""
    redis_connections: int | None = None
    """Connections redis-server accepted during the pass (only ours uses Redis)."""

    def ratios(self, concurrency: int, metric: str) -> tuple[float, float]:
        ours = self.series[("ours", concurrency)].values(metric)
        bare = self.series[("bare", concurrency)].values(metric)
        return (
            percentile(ours, 50) / max(percentile(bare, 50), 1e-9),
            percentile(ours, 95) / max(percentile(bare, 95), 1e-9),
        )

    def markdown(self) -> str:
        rows: list[list[object]] = []
        for (kind, conc), series in self.series.items():
            row: list[object] = [kind, conc, len(series.samples), series.errors]
            for metric in ("ttfe", "ttft", "total", "pre_model"):
                values = [v * 1000 for v in series.values(metric)]
                row += [percentile(values, 50), percentile(values, 95)]
            rows.append(row)
        header = ["server", "concurrency", "requests", "errors", "TTFE p50 ms", "TTFE p95 ms", "TTFT p50 ms",
                  "TTFT p95 ms", "total p50 ms", "total p95 ms", "pre-model p50 ms", "pre-model p95 ms"]
        ratio_rows: list[list[object]] = []
        for conc in self.config["concurrency"]:
            for metric in ("ttfe", "ttft", "total"):
                p50, p95 = self.ratios(conc, metric)
                ratio_rows.append([conc, metric.upper(), f"{p50:.2f}", f"{p95:.2f}"])
        parts = [
            f"machine: {machine()}",
            f"config: {self.config}",
            "",
            markdown_table(header, rows),
            *([""] + [f"failed: {n} x {cause}" for cause, n in sorted(failures.items())] if failures else []),
            "",
            *(
                [f"server CPU over the pass (warm-up included), ours / bare: {self.cpu_s['ours']:.2f} s / "
                 f"{self.cpu_s['bare']:.2f} s = {self.cpu_s['ours'] / max(self.cpu_s['bare'], 1e-9):.2f}", ""]
                if self.cpu_s else []
            ),
            *(
                [f"Redis connections opened during the pass (warm-up included): {self.redis_connections}", ""]
                if self.redis_connections is not None else []
            ),
            "Ratios ours / bare:",
            "",
            markdown_table(["concurrency", "metric", "p50 ratio", "p95 ratio"], ratio_rows),
        ]
        for conc, data in self.breakdown.items():
            names = sorted(data["per_run_ms"], key=lambda n: -data["per_run_ms"][n])
            parts += [
                "",
                f"Where ours waits, concurrency {conc} (timed pass, {data['runs']} runs, TTFT p50 "
                f"{data['ttft_p50_ms']:.0f} ms): wall time awaiting each port method, per run",
                "",
                markdown_table(
                    ["method", "calls per run", "ms per run"],
                    [[n, data["calls_per_run"][n], data["per_run_ms"][n]] for n in names],
                ),
            ]
        return "\n".join(parts)


SERVERS = [sys.executable, "-m", "bench.overhead_servers"]


class Child:
    """A server process of ours: started, read until READY, stopped by closing its stdin (then terminate).

    Its standard output is a pipe, read to the end after READY (and dropped): ``ours`` prints a CloudWatch EMF
    line per run (the run metrics), and once an unread pipe's 64 KiB fill, that ``print`` blocks ``ours``' event
    loop: every request in flight then waits forever (the 30 s client timeouts this benchmark once showed)."""

    def __init__(self, args: list[str], program: Sequence[str] = SERVERS) -> None:
        self.proc = subprocess.Popen(
            [*program, *args],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        self.name = args[0]
        self.url = ""

    def wait_ready(self) -> Child:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + 60
        line = ""
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if line.startswith("READY ") or not line:
                break
        if not line.startswith("READY "):
            self.stop()
            raise RuntimeError(f"bench server {self.name} did not start")
        self.url = line.split()[1]
        threading.Thread(target=self._drain, name=f"drain-{self.name}", daemon=True).start()
        return self

    def cpu_seconds(self) -> float:
        """User + system CPU time the process used so far (Linux ``/proc``)."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        with contextlib.suppress(OSError, ValueError):
            for _ in self.proc.stdout:
                pass

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(BrokenPipeError, OSError):
                assert self.proc.stdin is not None
                self.proc.stdin.close()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()


@contextlib.contextmanager
def started(*commands: Sequence[str]) -> Iterator[list[Child]]:
    """Start the servers together (their imports overlap), wait until each is ready, stop them all after."""
    children: list[Child] = []
    try:
        for command in commands:
            children.append(Child(list(command)))
        yield [child.wait_ready() for child in children]
    finally:
        for child in children:
            child.stop()


def _ours_body(thread: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "threadId": thread,
        "runId": f"run-{uuid.uuid4().hex[:12]}",
        "messages": messages,
        "tools": [],
        "context": [],
        "state": {},
        "forwardedProps": {},
    }


async def one_request(
    client: httpx.AsyncClient, kind: str, url: str, tag: str, token: str, *, existing: bool = False
) -> tuple[Sample | None, float]:
    """Send one run; returns the sample (None on failure) and the monotonic send time. ``existing``: ours' run
    is the second turn of its thread (a first turn, not measured, is sent before), and the client resends the
    whole conversation, as AG-UI clients do."""
    content = f"Tell me something. {tag}"
    if kind == "ours":
        thread = f"th-{uuid.uuid4().hex[:12]}"
        auth = {"Authorization": f"Bearer {token}"}
        messages = [{"id": f"msg-{uuid.uuid4().hex[:12]}", "role": "user", "content": content}]
        if existing:
            earlier = {"id": f"msg-{uuid.uuid4().hex[:12]}", "role": "user", "content": "An earlier question."}
            try:
                primed = await client.post(f"{url}/api/v1/agent", json=_ours_body(thread, [earlier]), headers=auth)
            except httpx.HTTPError as exc:
                failures[f"{kind}: first turn {type(exc).__name__}"] += 1
                return None, time.monotonic()
            if primed.status_code != 200:
                failures[f"{kind}: first turn HTTP {primed.status_code}"] += 1
                return None, time.monotonic()
            messages = [earlier, *messages]
        body = _ours_body(thread, messages)
        target, headers = f"{url}/api/v1/agent", auth
    else:
        body = {"messages": [{"role": "user", "content": content}]}
        target, headers = f"{url}/bare", {}
    sent = time.monotonic()
    ttfe = ttft = None
    finished = False
    try:
        async with client.stream("POST", target, json=body, headers=headers) as resp:
            if resp.status_code != 200:
                failures[f"{kind}: HTTP {resp.status_code} {(await resp.aread())[:120]!r}"] += 1
                return None, sent
            async for line in resp.aiter_lines():
                if not line.startswith("data:"):
                    continue
                now = time.monotonic() - sent
                ttfe = ttfe if ttfe is not None else now
                data = line[5:].strip()
                if kind == "bare":
                    if data == "[DONE]":
                        finished = True
                    elif ttft is None:
                        ttft = now
                    continue
                event = json.loads(data)
                if ttft is None and event.get("type") == "TEXT_MESSAGE_CONTENT":
                    ttft = now
                if event.get("type") in ("RUN_FINISHED", "RUN_ERROR"):
                    finished = event.get("type") == "RUN_FINISHED"
    except httpx.HTTPError as exc:
        waited = time.monotonic() - sent
        seen = "first text" if ttft is not None else "an event, no text" if ttfe is not None else "no event"
        failures[f"{kind}: {type(exc).__name__} after {waited:.0f} s, {seen}"] += 1
        return None, sent
    total = time.monotonic() - sent
    if not finished or ttfe is None or ttft is None:
        failures[f"{kind}: ended without RUN_FINISHED (first text seen: {ttft is not None})"] += 1
        return None, sent
    return Sample(ttfe=ttfe, ttft=ttft, total=total), sent


async def drive(
    urls: dict[str, str],
    concurrency: Sequence[int],
    rounds: dict[int, int],
    warmup: int,
    kinds: Sequence[str] = ("ours", "bare"),
    existing: bool = False,
    profile: bool = False,
    warm_burst: bool = True,
) -> tuple[dict[tuple[str, int], Series], dict[str, tuple[str, int, float]]]:
    token = mint_local_token(JWT_SECRET, user_id="bench-user", tenant_id="bench-tenant", scopes=())
    series = {(kind, conc): Series() for conc in concurrency for kind in kinds}
    sent_at: dict[str, tuple[str, int, float]] = {}
    counter = 0
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    async with httpx.AsyncClient(timeout=httpx.Timeout(30.0), limits=limits) as client:
        for kind in kinds:  # warm up both servers (imports, connection pools, first model call)
            for _ in range(warmup):
                counter += 1
                await one_request(client, kind, urls[kind], f"bench-{counter}", token, existing=existing)
            if warm_burst and max(concurrency) > 1:
                # One burst at the highest concurrency: the measured rounds see warm connection pools (Redis,
                # the model's HTTP pool, the client's), as a server under that load has, not their first opening.
                tags = [f"bench-{counter + i + 1}" for i in range(max(concurrency))]
                counter += len(tags)
                await asyncio.gather(
                    *(one_request(client, kind, urls[kind], tag, token, existing=existing) for tag in tags)
                )
        if profile:  # ours' profiler covers the measured runs only
            await client.post(f"{urls['ours']}/bench/profile/on")
        for conc in concurrency:
            for round_index in range(rounds[conc]):
                order = list(kinds) if round_index % 2 == 0 else list(reversed(kinds))
                for kind in order:
                    tags = []
                    for _ in range(conc):
                        counter += 1
                        tags.append(f"bench-{counter}")
                    results = await asyncio.gather(
                        *(one_request(client, kind, urls[kind], tag, token, existing=existing) for tag in tags)
                    )
                    for tag, (sample, sent) in zip(tags, results, strict=True):
                        if sample is None:
                            series[(kind, conc)].errors += 1
                        else:
                            series[(kind, conc)].samples.append(sample)
                            sent_at[tag] = (kind, conc, sent)
                            sample_ref[tag] = sample
        if profile:
            await client.post(f"{urls['ours']}/bench/profile/off")
    return series, sent_at


sample_ref: dict[str, Sample] = {}
failures: Counter[str] = Counter()
"""Why requests failed ("kind: cause"), printed under the table."""


def attach_pre_model(arrivals: dict[str, float], sent_at: dict[str, tuple[str, int, float]]) -> None:
    for tag, (_, _, sent) in sent_at.items():
        arrived = arrivals.get(tag)
        if arrived is not None and tag in sample_ref:
            sample_ref[tag].pre_model = arrived - sent


def run(
    *,
    concurrency: Sequence[int],
    rounds: dict[int, int],
    warmup: int,
    first_delay: float,
    chunk_delay: float,
    chunks: int,
    breakdown: bool,
    dynamo: str = "in-process",
    store_latency_ms: float = 5.0,
    existing: bool = False,
    profile_dir: str = "",
    warm_burst: bool = True,
) -> OverheadResult:
    sample_ref.clear()
    failures.clear()
    model_args = ["--first-delay", str(first_delay), "--chunk-delay", str(chunk_delay), "--chunks", str(chunks)]
    config = {
        "concurrency": list(concurrency),
        "requests_per_server": {c: c * rounds[c] for c in concurrency},
        "warmup": warmup,
        "model_first_chunk_delay_s": first_delay,
        "model_chunk_delay_s": chunk_delay,
        "model_chunks": chunks,
        "thread": "existing (second turn)" if existing else "new",
        "warm_burst": warm_burst,
        "store": {
            "server": "moto DynamoDB server process (one request at a time)",
            "in-process": "moto DynamoDB in ours' process (one request at a time, as in the tests)",
            "memory": f"in-memory store, {store_latency_ms:g} ms per request, concurrent",
        }[dynamo],
    }
    with tempfile.TemporaryDirectory(prefix="bench-overhead-") as tmp, redis_server() as redis_url:
        model_report = os.path.join(tmp, "model.json")
        extra = [["dynamo"]] if dynamo == "server" else []
        with started(["model", *model_args, "--report", model_report], *extra) as (model, *dynamodb):
            dynamo_args = _store_args(dynamo, dynamodb[0].url if dynamodb else "", store_latency_ms)
            with started(
                ["ours", "--model-url", model.url, "--redis-url", redis_url, *dynamo_args],
                ["bare", "--model-url", model.url],
            ) as (ours, bare):
                before = {"ours": ours.cpu_seconds(), "bare": bare.cpu_seconds()}
                connections_before = _redis_connections(redis_url)
                series, sent_at = asyncio.run(
                    drive(
                        {"ours": ours.url, "bare": bare.url},
                        concurrency,
                        rounds,
                        warmup,
                        existing=existing,
                        warm_burst=warm_burst,
                    )
                )
                cpu = {"ours": ours.cpu_seconds() - before["ours"], "bare": bare.cpu_seconds() - before["bare"]}
                connections = _redis_connections(redis_url) - connections_before
        with open(model_report, encoding="utf-8") as fh:
            attach_pre_model(json.load(fh)["arrivals"], sent_at)
        result = OverheadResult(config, series, cpu_s=cpu, redis_connections=connections)
        if breakdown:
            result.breakdown = {
                conc: _breakdown(tmp, redis_url, model_args, conc, rounds[conc], warmup, dynamo == "server",
                                 lambda url: _store_args(dynamo, url, store_latency_ms), profile_dir)
                for conc in concurrency
            }
    return result


def _redis_connections(url: str) -> int:
    """``total_connections_received`` of the redis-server (this query's own connection included)."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        return int(client.info("stats")["total_connections_received"])
    finally:
        client.close()


def _store_args(dynamo: str, dynamo_url: str, latency_ms: float) -> list[str]:
    if dynamo == "server":
        return ["--dynamo-url", dynamo_url]
    if dynamo == "memory":
        return ["--memory-store-ms", str(latency_ms)]
    return []


def _breakdown(
    tmp: str,
    redis_url: str,
    model_args: list[str],
    concurrency: int,
    rounds: int,
    warmup: int,
    with_dynamo_server: bool,
    store_args: Callable[[str], list[str]],
    profile_dir: str = "",
) -> dict[str, Any]:
    """Ours alone at one concurrency, store and stream timed, event loop under cProfile."""
    report = os.path.join(tmp, f"ours-{concurrency}.json")
    extra = [["dynamo"]] if with_dynamo_server else []
    with started(["model", *model_args], *extra) as (model, *dynamodb):
        command = ["ours", "--model-url", model.url, "--redis-url", redis_url,
                   *store_args(dynamodb[0].url if dynamodb else ""),
                   "--timings", "--profile", "--report", report]
        with started(command) as (ours,):
            series, _ = asyncio.run(
                drive({"ours": ours.url}, [concurrency], {concurrency: rounds}, warmup, kinds=("ours",), profile=True)
            )
    with open(report, encoding="utf-8") as fh:
        data: dict[str, Any] = json.load(fh)
    if profile_dir:
        Path(profile_dir).mkdir(parents=True, exist_ok=True)
        shutil.copy(report + ".prof", Path(profile_dir) / f"ours-{concurrency}.prof")
    runs = sum(len(s.samples) + s.errors for s in series.values()) + warmup
    samples = [sample for one in series.values() for sample in one.samples]
    data["runs"] = runs
    data["ttft_p50_ms"] = percentile([s.ttft * 1000 for s in samples], 50)
    data["per_run_ms"] = {name: round(v["seconds"] * 1000 / runs, 2) for name, v in data.get("timings", {}).items()}
    data["calls_per_run"] = {name: round(v["calls"] / runs, 2) for name, v in data.get("timings", {}).items()}
    return data


def main(argv: Sequence[str] | None = None) -> OverheadResult:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="concurrency 1 only, 2 requests per server")
    parser.add_argument("--concurrency", default="1,16")
    parser.add_argument("--requests", type=int, default=24, help="requests per server at each concurrency (about)")
    parser.add_argument("--first-delay", type=float, default=0.2, help="model: seconds before the first chunk")
    parser.add_argument("--chunk-delay", type=float, default=0.02, help="model: seconds between chunks")
    parser.add_argument("--chunks", type=int, default=20)
    parser.add_argument("--no-breakdown", action="store_true")
    parser.add_argument("--store", choices=["in-process", "server", "memory"], default="in-process",
                        help="ours' DynamoDB: moto in ours' process (default, as the tests), moto as its own "
                        "server process, or the in-memory store with --store-latency-ms per request")
    parser.add_argument("--store-latency-ms", type=float, default=5.0)
    parser.add_argument("--existing-thread", action="store_true",
                        help="ours' measured run is the second turn of its thread (the normal case)")
    parser.add_argument("--show-profile", action="store_true", help="print the cProfile tables of the timed pass")
    parser.add_argument("--profile-dir", default="", help="keep the timed pass's raw cProfile data here")
    parser.add_argument("--no-warm-burst", action="store_true",
                        help="warm up with sequential requests only (the measured burst then opens the pools)")
    args = parser.parse_args(argv)
    if args.smoke:
        concurrency, rounds, warmup, breakdown = [1], {1: 2}, 1, False
        args.first_delay, args.chunk_delay, args.chunks = 0.05, 0.005, 5
    else:
        concurrency = [int(c) for c in args.concurrency.split(",")]
        rounds = {c: max(2, -(-args.requests // c)) for c in concurrency}
        warmup, breakdown = 3, not args.no_breakdown
    result = run(
        concurrency=concurrency,
        rounds=rounds,
        warmup=warmup,
        first_delay=args.first_delay,
        chunk_delay=args.chunk_delay,
        chunks=args.chunks,
        breakdown=breakdown,
        dynamo=args.store,
        store_latency_ms=args.store_latency_ms,
        existing=args.existing_thread,
        profile_dir=args.profile_dir,
        warm_burst=not args.no_warm_burst,
    )
    print(result.markdown())
    if args.show_profile:
        for conc, data in result.breakdown.items():
            print(f"\ncProfile of the event loop, concurrency {conc}:")
            print(data.get("profile_tottime", ""))
            print(data.get("profile_cumulative", ""))
    return result


if __name__ == "__main__":
    main()
