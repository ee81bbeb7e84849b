"""The three servers of the overhead benchmark, each in its own process: ``python -m bench.overhead_servers KIND``.

- ``model``: the tests' scripted OpenAI-compatible server (``tests/support/model_server.py``) answering every
  request with the same text after fixed delays; it notes when each request arrived (by the ``bench-<n>`` tag in
  the last user message) so the client can split the time before and after the model.
- ``dynamo``: moto's DynamoDB as a server of its own (werkzeug, one request at a time, since moto's backend is
  not thread-safe), with the table created: ours reaches it over HTTP as it would reach DynamoDB, and moto's CPU
  is not charged to ours' process.
- ``ours``: the real app (``functions.agent_api.app.create_app``) under uvicorn, with DynamoDB at ``--dynamo-url``
  (or, without it, moto in-process serialised as in the tests; or, with ``--memory-store-ms``, the contract-tested
  in-memory store answering each request after that many milliseconds, concurrently, like DynamoDB does), a real
  redis-server and the real ``openai`` adapter pointed at ``model``.
  ``--timings`` wraps the store and the event stream in timers; ``--profile`` runs the event loop under
  cProfile. Both write their findings to ``--report`` when the server stops.
- ``bare``: a FastAPI SSE pass-through: one ``openai`` streaming call per request, each content delta forwarded
  as a ``data:`` frame. Same uvicorn settings as ``ours``.

Each prints ``READY <base url>`` and serves until its standard input closes (the parent closing the pipe, or
dying), then stops by itself. Loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import io
import json
import logging
import os
import pstats
import re
import sys
import threading
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

TAG = re.compile(r"bench-(\d+)")
JWT_SECRET = "bench-secret-for-hs256-tokens-0123456789"
TABLE = "bench-overhead"
REGION = "us-east-1"


def _uvicorn_config(app: Any, port: int) -> uvicorn.Config:
    """The same settings for ``ours`` and ``bare`` (as functions/agent_api/run.sh: no access log)."""
    return uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False, lifespan="on")


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for_stdin_eof(on_eof: Callable[[], None]) -> None:
    def watch() -> None:
        sys.stdin.read()
        on_eof()

    threading.Thread(target=watch, name="stdin-eof", daemon=True).start()


async def _serve(server: uvicorn.Server, port: int) -> None:
    _wait_for_stdin_eof(lambda: setattr(server, "should_exit", True))
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            await task
            raise RuntimeError("server did not start")
        await asyncio.sleep(0.02)
    print(f"READY http://127.0.0.1:{port}", flush=True)
    await task


# ---------------------------------------------------------------------------------------------------------------
# model
# ---------------------------------------------------------------------------------------------------------------


def run_model(args: argparse.Namespace) -> None:
    from tests.support.model_server import ModelServer, ScriptedTurn

    arrivals: dict[str, float] = {}
    lock = threading.Lock()
    words = [f" word{i}" for i in range(args.chunks)]

    def responder(body: dict[str, Any]) -> ScriptedTurn:
        now = time.monotonic()
        last_user = next(
            (str(m.get("content")) for m in reversed(body.get("messages", [])) if m.get("role") == "user"), ""
        )
        match = TAG.search(last_user)
        if match:
            with lock:
                arrivals[match.group(0)] = now
        return ScriptedTurn(
            text=words, first_chunk_delay_s=args.first_delay, chunk_delay_s=args.chunk_delay, usage=(100, args.chunks)
        )

    done = threading.Event()
    with ModelServer(responder=responder) as server:
        print(f"READY {server.base_url}", flush=True)
        _wait_for_stdin_eof(done.set)
        done.wait()
    if args.report:
        with open(args.report, "w", encoding="utf-8") as out:
            json.dump({"arrivals": arrivals}, out)


# ---------------------------------------------------------------------------------------------------------------
# dynamo
# ---------------------------------------------------------------------------------------------------------------


def run_dynamo(args: argparse.Namespace) -> None:
    import boto3
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import make_server

    from shared.adapters.aws.table_schema import create_table

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        os.environ.setdefault(name, "bench")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
    port = _free_port()
    server = make_server(
        "127.0.0.1",
        port,
        DomainDispatcherApplication(create_backend_app),
        threaded=False,
        request_handler=MotoRequestHandler,
    )
    thread = threading.Thread(target=server.serve_forever, name="moto", daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    create_table(boto3.client("dynamodb", region_name=REGION, endpoint_url=url), TABLE)
    done = threading.Event()
    _wait_for_stdin_eof(done.set)
    print(f"READY {url}", flush=True)
    done.wait()
    server.shutdown()
    thread.join(10)


# ---------------------------------------------------------------------------------------------------------------
# bare
# ---------------------------------------------------------------------------------------------------------------


def run_bare(args: argparse.Namespace) -> None:
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=args.model_url, api_key="none", max_retries=0)
    app = FastAPI()

    @app.post("/bare")
    async def bare(request: Request) -> StreamingResponse:
        body = await request.json()
        messages: Any = [{"role": "user", "content": m["content"]} for m in body["messages"]]

        async def frames() -> AsyncIterator[str]:
            stream: Any = await client.chat.completions.create(model="qwen3.5-30b-a3b", messages=messages, stream=True)
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    yield f"data: {json.dumps({'delta': chunk.choices[0].delta.content})}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(frames(), media_type="text/event-stream")

    port = _free_port()
    asyncio.run(_serve(uvicorn.Server(_uvicorn_config(app, port)), port))


# ---------------------------------------------------------------------------------------------------------------
# ours
# ---------------------------------------------------------------------------------------------------------------


class Timings:
    """Wall time spent awaiting each store / stream method, summed over the server's life."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)

    def wrap(self, target: Any, prefix: str) -> Any:
        timings = self

        class Timed:
            def __getattr__(self, name: str) -> Any:
                attr = getattr(target, name)
                if not asyncio.iscoroutinefunction(attr):
                    return attr

                async def timed(*a: Any, **kw: Any) -> Any:
                    started = time.perf_counter()
                    try:
                        return await attr(*a, **kw)
                    finally:
                        key = f"{prefix}.{name}"
                        timings.seconds[key] += time.perf_counter() - started
                        timings.calls[key] += 1

                return timed

        return Timed()

    def report(self) -> dict[str, dict[str, float]]:
        return {k: {"calls": self.calls[k], "seconds": round(v, 4)} for k, v in sorted(self.seconds.items())}


TABLE_PARTS = ("threads", "runs", "audit")
"""The main table's adapters a store holds (``shared.wiring.MainTable``)."""


def _latency_store(latency_s: float) -> Any:
    """The in-memory store (same request counts as the DynamoDB adapter) with a round trip per request."""
    from shared.adapters.in_memory.store import InMemoryStore

    class LatencyStore(InMemoryStore):
        async def _request(self) -> None:
            self.request_count += 1
            await asyncio.sleep(latency_s)

    return LatencyStore()


def _delayed(target: Any, latency_s: float) -> Any:
    """Every coroutine method of ``target`` answers after ``latency_s`` (one request per call)."""

    class Delayed:
        def __getattr__(self, name: str) -> Any:
            attr = getattr(target, name)
            if not asyncio.iscoroutinefunction(attr):
                return attr

            async def delayed(*a: Any, **kw: Any) -> Any:
                await asyncio.sleep(latency_s)
                return await attr(*a, **kw)

            return delayed

    return Delayed()


def _add_profile_switch(app: FastAPI, profiler: cProfile.Profile) -> None:
    """``POST /bench/profile/on`` and ``/off``: the client profiles the measured runs only, not the start-up,
    the warm-up runs or the imports they trigger."""

    async def switch(state: str) -> dict[str, str]:
        if state == "on":
            profiler.enable()
        else:
            profiler.disable()
        return {"profile": state}

    app.add_api_route("/bench/profile/{state}", switch, methods=["POST"])


def run_ours(args: argparse.Namespace) -> None:
    import boto3
    from moto import mock_aws

    from functions.agent_api.app import create_app
    from shared.adapters.aws.dynamodb_store import DynamoDBStore
    from shared.adapters.aws.memory_store import DynamoDBMemoryStore
    from shared.adapters.aws.table_schema import create_table
    from shared.adapters.aws.usage_counters import DynamoDBUsageCounters
    from shared.adapters.in_memory.memories import InMemoryMemoryStore
    from shared.adapters.in_memory.usage import InMemoryUsageCounters
    from shared.adapters.redis_stream import RedisEventStream, connect
    from shared.settings import Settings
    from shared.wiring import ServiceOverrides, Services
    from tests.support.moto_lock import OneRequestAtATime

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        os.environ.setdefault(name, "bench")
    timings = Timings()
    profiler = cProfile.Profile() if args.profile else None
    in_process_moto = not args.dynamo_url and args.memory_store_ms < 0
    with mock_aws() if in_process_moto else contextlib.nullcontext():
        store: Any = None
        memories: Any = None
        counters: Any = None  # None: the wiring's (the moto server's endpoint, or an in-memory store's run)
        if args.memory_store_ms >= 0:
            store = _latency_store(args.memory_store_ms / 1000)
            memories = _delayed(InMemoryMemoryStore(), args.memory_store_ms / 1000)
            counters = _delayed(InMemoryUsageCounters(), args.memory_store_ms / 1000)
        elif in_process_moto:
            raw_client = boto3.client("dynamodb", region_name=REGION)
            create_table(raw_client, TABLE)
            locked: Any = OneRequestAtATime(raw_client)  # moto in-process is not thread-safe (as in the tests)
            store = DynamoDBStore(TABLE, lambda: locked)
            memories = DynamoDBMemoryStore(TABLE, lambda: locked)
            counters = DynamoDBUsageCounters(TABLE, lambda: locked, usage_retention=timedelta(days=400))
        settings = Settings(
            table_name=TABLE,
            aws_region=REGION,
            dynamodb_endpoint_url=args.dynamo_url or None,
            jwt_secret=JWT_SECRET,
            auth_mode="hs256",
            llm_base_url=args.model_url,
            llm_api_key="none",
            redis_url=args.redis_url,
            llm_max_retries=0,
            limits=os.environ.get("LIMITS") or None,  # ``LIMITS=... python -m bench.server_overhead``: limits on
        )

        class LazyStream:
            """The Redis client must be created on the server's event loop."""

            _inner: RedisEventStream | None = None

            def __getattr__(self, name: str) -> Any:
                if self._inner is None:
                    self._inner = RedisEventStream(connect(args.redis_url, cluster=False))  # as the wiring does
                return getattr(self._inner, name)

        stream: Any = LazyStream()
        if store is None:  # the real wiring: boto3 clients to the endpoint, created lazily
            store, memories = Services(settings).store, Services(settings).memories
        if args.timings:  # the table's three adapters each timed, under one prefix
            store = SimpleNamespace(**{part: timings.wrap(getattr(store, part), "store") for part in TABLE_PARTS})
            stream = timings.wrap(stream, "stream")
            memories = timings.wrap(memories, "memories")
        overrides = ServiceOverrides(store=store, stream=stream, memory_store=memories, usage_counters=counters)
        services = Services(settings, overrides=overrides)
        port = _free_port()
        app = create_app(services, freeze_heap=True)  # a server process, as deployed
        if profiler is not None:
            _add_profile_switch(app, profiler)
        server = uvicorn.Server(_uvicorn_config(app, port))
        try:
            asyncio.run(_serve(server, port))
        finally:
            if profiler is not None:
                profiler.disable()
    if args.report:
        report: dict[str, Any] = {"timings": timings.report()}
        if profiler is not None:
            profiler.dump_stats(args.report + ".prof")  # for pstats / snakeviz beyond the printed rows
            text = io.StringIO()
            pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(args.profile_rows)
            report["profile_tottime"] = text.getvalue()
            text = io.StringIO()
            pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(args.profile_rows)
            report["profile_cumulative"] = text.getvalue()
        with open(args.report, "w", encoding="utf-8") as out:
            json.dump(report, out, indent=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=["model", "dynamo", "ours", "bare"])
    parser.add_argument("--model-url", default="")
    parser.add_argument("--redis-url", default="")
    parser.add_argument("--dynamo-url", default="", help="ours: DynamoDB endpoint (default: moto in-process)")
    parser.add_argument("--memory-store-ms", type=float, default=-1.0,
                        help="ours: use the in-memory store with this latency per request instead of DynamoDB")
    parser.add_argument("--first-delay", type=float, default=0.2)
    parser.add_argument("--chunk-delay", type=float, default=0.02)
    parser.add_argument("--chunks", type=int, default=20)
    parser.add_argument("--timings", action="store_true")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--profile-rows", type=int, default=40)
    parser.add_argument("--report", default="")
    args = parser.parse_args()
    {"model": run_model, "dynamo": run_dynamo, "ours": run_ours, "bare": run_bare}[args.kind](args)


if __name__ == "__main__":
    main()
