"""What traces cost: ``python -m bench.trace_cost``.

All figures are CPU time (``time.process_time``: steadier than wall time on a shared machine).

1. **INIT with traces on**: in fresh interpreters, the CPU time ``configure_tracing`` takes with an endpoint set (it
   imports the SDK's trace module, the OTLP/HTTP exporter with ``requests`` and ``protobuf``, and builds the
   provider); with no endpoint it imports nothing and takes microseconds.
2. **redis-py and the SDK**: redis-py imports ``opentelemetry.sdk.metrics`` by itself whenever the SDK is installed
   (its optional metrics support), traces on or off; measured as ``import redis.asyncio`` with the SDK importable
   against the same import with it hidden.
3. **Per run**: CPU time of the process per chat run (one tool call, two model turns) through the app on the
   in-memory adapters, traces off against traces on, exporting over OTLP/HTTP (batch processor, flush at each
   response's end) to a receiver in another process. Medians of ``--repeats`` fresh processes.

Times are this machine's (shared cores: compare the two sides of one run, not across runs).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

_CONFIGURE = """
import time
from shared.settings import Settings
from shared.tracing.setup import configure_tracing
t = time.process_time()
configure_tracing(Settings(otel_exporter_otlp_endpoint={endpoint!r}))
print((time.process_time() - t) * 1000)
"""
_REDIS = """
import sys, time
{hide}
t = time.process_time()
import redis.asyncio
print((time.process_time() - t) * 1000)
"""


def _child_ms(code: str) -> float:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    return float(out.stdout.strip().splitlines()[-1])


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 2)


def init_costs(repeats: int) -> dict[str, float]:
    on: list[float] = []
    off: list[float] = []
    redis_with: list[float] = []
    redis_without: list[float] = []
    for _ in range(repeats):
        off.append(_child_ms(_CONFIGURE.format(endpoint="")))
        on.append(_child_ms(_CONFIGURE.format(endpoint="http://127.0.0.1:9")))
        redis_with.append(_child_ms(_REDIS.format(hide="")))
        redis_without.append(_child_ms(_REDIS.format(hide="sys.modules['opentelemetry.sdk.metrics'] = None")))
    return {
        "configure_off_ms": _median(off),
        "configure_on_ms": _median(on),
        "redis_import_with_sdk_ms": _median(redis_with),
        "redis_import_without_sdk_ms": _median(redis_without),
    }


async def _runs(count: int, endpoint: str | None) -> float:
    """CPU seconds per chat run, after one unmeasured run (in this process: call it in a fresh one)."""
    import httpx

    from functions.agent_api.app import create_app
    from shared.adapters.in_memory.memories import InMemoryMemoryStore
    from shared.adapters.in_memory.store import InMemoryStore
    from shared.adapters.in_memory.stream import InMemoryEventStream
    from shared.auth import mint_local_token
    from shared.settings import Settings
    from shared.tracing.setup import configure_tracing
    from shared.wiring import ServiceOverrides, Services
    from tests.support.scripted_model import ScriptedModel, Turn

    def turn(request: Any) -> Turn:
        answered = any(m.role == "tool" for m in request.messages[-2:])
        return Turn(text=["It is noon."]) if answered else Turn(tool_calls=[("c1", "get_current_time", "{}")])

    secret = "bench-trace-cost-secret-0123456789"
    settings = Settings(jwt_secret=secret, auth_mode="hs256", embedded=True, otel_exporter_otlp_endpoint=endpoint)
    configure_tracing(settings)
    overrides = ServiceOverrides(
        store=InMemoryStore(),
        stream=InMemoryEventStream(),
        memory_store=InMemoryMemoryStore(),
        model=ScriptedModel(fallback=turn),
    )
    services = Services(settings, overrides=overrides)
    token = mint_local_token(secret, user_id="u", tenant_id="t", scopes=())
    headers = {"Authorization": f"Bearer {token}"}
    transport = httpx.ASGITransport(app=create_app(services))
    async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:

        async def one(i: int) -> None:
            body = {"threadId": f"th-{i}", "runId": f"r-{i}", "messages": [{"id": f"m{i}", "role": "user",
                                                                             "content": "what time is it?"}]}
            response = await client.post("/api/v1/agent", json=body, headers=headers)
            assert '"RUN_FINISHED"' in response.text

        await one(-1)
        started = time.process_time()
        for i in range(count):
            await one(i)
        return (time.process_time() - started) / count


def per_run_costs(repeats: int, count: int) -> dict[str, float]:
    from tests.support.traces import otlp_receiver

    off: list[float] = []
    on: list[float] = []
    with otlp_receiver() as receiver:  # another thread of this process, not of the measured children
        for _ in range(repeats):
            for endpoint, into in ((None, off), (receiver.endpoint, on)):
                code = f"import asyncio, bench.trace_cost as b; print(asyncio.run(b._runs({count}, {endpoint!r})))"
                env = {**os.environ, "OTEL_BSP_SCHEDULE_DELAY": "5000"}
                out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                     cwd=REPO, env=env)
                into.append(float(out.stdout.strip().splitlines()[-1]) * 1000)
        spans = len(receiver.spans)
    return {"cpu_ms_per_run_off": _median(off), "cpu_ms_per_run_on": _median(on), "spans_received": spans}


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--runs", type=int, default=50, help="chat runs per process")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args(argv)
    repeats, runs = (1, 3) if args.smoke else (args.repeats, args.runs)
    figures = {**init_costs(repeats), **per_run_costs(repeats, runs)}
    print(json.dumps(figures, indent=2))
    return figures


if __name__ == "__main__":
    main()
