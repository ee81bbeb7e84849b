"""Time to first text of the first request after a fresh process start, against a warm request:
``python -m bench.first_request``.

Each round starts a fresh instance of the streaming function exactly as Lambda starts it (``functions/agent_api/
run.sh``, uvicorn) on a shared moto server, redis-server and scripted model server, waits for its readiness check
(``/healthz``, what the Web Adapter waits for before routing the first invocation), then times from sending
``POST /api/v1/agent`` to the first ``TEXT_MESSAGE_CONTENT``: once for the first request, then for ``--warm`` more.
The ratio is the median first request over the median warm request. Work done during init (the lifespan hook:
clients and libraries, ``Services.warm_up``) is outside the timed request, as on Lambda.

``--src`` runs another source tree (for example a checkout of an older commit) for comparison.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.overhead_servers import JWT_SECRET
from bench.stats import machine, markdown_table
from shared.auth import mint_local_token
from tests.support.lambda_instance import Instance
from tests.support.model_server import ModelServer, ScriptedTurn
from tests.support.moto_server import moto_server
from tests.support.redis_server import redis_server

TABLE = "bench-first-request"
REGION = "us-east-1"


@dataclass
class FirstRequestResult:
    first_ms: list[float] = field(default_factory=list)
    warm_ms: list[float] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        return statistics.median(self.first_ms) / statistics.median(self.warm_ms)

    def table(self) -> str:
        rows = [
            ["first request after start", len(self.first_ms), statistics.median(self.first_ms), max(self.first_ms)],
            ["warm request", len(self.warm_ms), statistics.median(self.warm_ms), max(self.warm_ms)],
        ]
        return markdown_table(["request", "n", "median TTFT ms", "max ms"], rows)


async def time_to_first_text(client: httpx.AsyncClient, url: str, token: str) -> float:
    payload = {
        "threadId": f"th-{uuid.uuid4().hex[:12]}",
        "runId": f"run-{uuid.uuid4().hex[:12]}",
        "messages": [{"id": "u-1", "role": "user", "content": "hello"}],
    }
    started = time.perf_counter()
    first: float | None = None
    async with client.stream(
        "POST", f"{url}/api/v1/agent", json=payload, headers={"Authorization": f"Bearer {token}"}
    ) as resp:
        if resp.status_code != 200:
            raise RuntimeError(f"POST answered {resp.status_code}: {(await resp.aread())[:300]!r}")
        async for line in resp.aiter_lines():
            if first is None and line.startswith("data:") and '"TEXT_MESSAGE_CONTENT"' in line:
                first = time.perf_counter()
    if first is None:
        raise RuntimeError("the run streamed no text")
    return (first - started) * 1000


async def one_round(instance: Instance, warm: int, token: str) -> tuple[float, list[float]]:
    async with httpx.AsyncClient(timeout=60) as client:
        first = await time_to_first_text(client, instance.url, token)
        warm_ms = [await time_to_first_text(client, instance.url, token) for _ in range(warm)]
    return first, warm_ms


def run(*, rounds: int, warm: int, src: str | None) -> FirstRequestResult:
    import os

    import boto3

    from shared.adapters.aws.table_schema import create_table

    result = FirstRequestResult()
    token = mint_local_token(JWT_SECRET, user_id="bench", tenant_id="bench")
    turn = ScriptedTurn(text=["Hello", " there", "."], first_chunk_delay_s=0.02)
    with moto_server() as dynamodb_url, redis_server() as redis_url, ModelServer(lambda _body: turn) as model:
        os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
        os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
        create_table(boto3.client("dynamodb", region_name=REGION, endpoint_url=dynamodb_url), TABLE)
        env = {
            "TABLE_NAME": TABLE,
            "AWS_REGION": REGION,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "DYNAMODB_ENDPOINT_URL": dynamodb_url,
            "REDIS_URL": redis_url,
            "LLM_BASE_URL": model.base_url,
            "LLM_API_KEY": "bench-key",
            "AUTH_MODE": "hs256",
            "JWT_SECRET": JWT_SECRET,
        }
        if src:
            os.environ["LAMBDA_EMULATION_SRC"] = src
        with tempfile.TemporaryDirectory(prefix="bench-first-request-") as logs:
            for index in range(rounds):
                instance = Instance(f"round-{index}", env, Path(logs))
                try:
                    instance.wait_ready()
                    first, warm_ms = asyncio.run(one_round(instance, warm, token))
                finally:
                    instance.stop()
                result.first_ms.append(first)
                result.warm_ms.extend(warm_ms)
    return result


def main(argv: Sequence[str] | None = None) -> FirstRequestResult:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="one fresh start, two warm requests")
    parser.add_argument("--rounds", type=int, default=7, help="fresh process starts")
    parser.add_argument("--warm", type=int, default=5, help="warm requests after each first request")
    parser.add_argument("--src", default=None, help="another source tree to run (default: this one)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rounds, warm = (1, 2) if args.smoke else (args.rounds, args.warm)
    result = run(rounds=rounds, warm=warm, src=args.src)
    summary: dict[str, Any] = {
        "first_ms": result.first_ms,
        "warm_ms": result.warm_ms,
        "ratio": round(result.ratio, 2),
        "machine": machine(),
    }
    if args.json:
        print(json.dumps(summary))
    else:
        print(result.table())
        print(f"\nratio (median first / median warm): {result.ratio:.2f}   ({machine()})")
    return result


if __name__ == "__main__":
    main()
