"""What one streams task spends on idle follow streams: ``python -m bench.held_followers``.

The Fargate option (template.yaml ``StreamHost``) holds follow streams in one uvicorn process per task. This starts
that process as the ships tier does (``tests.support.stream_host_task``: the task definition's command and
environment in the staged artifact, on Python 3.12 with only its runtime set) against a moto server, a cluster-mode
redis-server and a scripted model, runs one turn on a thread, then opens ``--followers`` idle
``GET /api/v1/threads/{threadId}/events`` streams on it and reads the process's resident memory and CPU time before,
once they are all open, and after ``--seconds`` of holding them (each gets a ``: ping`` every 15 s and waits on a
blocking Redis read). The memory per follower is what ``bench.capacity``'s ``--followers-per-task`` rests on.
Opening many streams needs as many file descriptors on both sides (``ulimit -n``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import boto3
import httpx

from bench.stats import machine, markdown_table
from shared.adapters.aws.table_schema import create_table
from tests.support import shipped_artifact
from tests.support.model_server import ModelServer, ScriptedTurn
from tests.support.moto_server import moto_server
from tests.support.redis_server import redis_server
from tests.support.settings import REGION, TABLE, TEST_SECRET
from tests.support.stream_host_task import Task, task_definition
from tests.support.streams import body
from tests.support.tokens import bearer


@dataclass(frozen=True)
class HeldFollowersResult:
    followers: int
    seconds: float
    base_rss_mb: float
    open_rss_mb: float
    held_rss_mb: float
    held_cpu_s: float

    @property
    def kb_per_follower(self) -> float:
        return (self.held_rss_mb - self.base_rss_mb) * 1024 / self.followers

    def markdown(self) -> str:
        rows = [
            ["resident memory after one turn, MB", f"{self.base_rss_mb:.1f}"],
            [f"with {self.followers:,} followers open, MB", f"{self.open_rss_mb:.1f}"],
            [f"after holding them {self.seconds:.0f} s, MB", f"{self.held_rss_mb:.1f}"],
            ["memory per follower, KB", f"{self.kb_per_follower:.1f}"],
            [f"CPU time over those {self.seconds:.0f} s, s", f"{self.held_cpu_s:.3f}"],
            ["share of one vCPU", f"{self.held_cpu_s / self.seconds:.2%}"],
        ]
        return "\n".join([f"Idle followers on one streams task process ({machine()}):", "",
                          markdown_table(["figure", "value"], rows)])


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text(encoding="utf-8").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _hold(url: str, followers: int, seconds: float, pid: int) -> tuple[float, float, float]:
    opened: list[int] = []

    async def follow(client: httpx.AsyncClient) -> None:
        async with client.stream("GET", url, headers=bearer()) as response:
            if response.status_code != 200:
                raise RuntimeError(f"follow stream answered {response.status_code}")
            opened.append(1)
            async for _ in response.aiter_lines():
                pass

    limits = httpx.Limits(max_connections=followers + 8, max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=None, limits=limits) as client:
        streams = [asyncio.create_task(follow(client)) for _ in range(followers)]
        while len(opened) < followers:
            for stream in streams:
                if stream.done() and stream.exception():
                    raise RuntimeError("a follow stream failed") from stream.exception()
            await asyncio.sleep(0.2)
        await asyncio.sleep(5)  # the last ones' first reads settle
        open_rss, cpu_before = _rss_mb(pid), _cpu_s(pid)
        await asyncio.sleep(seconds)
        held_rss, held_cpu = _rss_mb(pid), _cpu_s(pid) - cpu_before
        for stream in streams:
            stream.cancel()
        await asyncio.gather(*streams, return_exceptions=True)
    return open_rss, held_rss, held_cpu


def measure(followers: int, seconds: float) -> HeldFollowersResult:
    python = shipped_artifact.runtime_python()
    if python is None:
        raise SystemExit("python3.12 (the functions' runtime) is not on PATH; set SHIPS_PYTHON to one")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2 * followers + 256:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 2 * followers + 256), hard))
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    with tempfile.TemporaryDirectory() as work:
        staged = shipped_artifact.stage(Path(work) / "lambda-src")
        runtime = shipped_artifact.install_requirements(staged / "requirements.txt", python)
        command, env, _ = task_definition()
        for name in ("JWT_ISSUER", "JWT_AUDIENCE", "JWKS_URL"):  # the test's own tokens instead
            env.pop(name)
        with moto_server() as moto, redis_server(cluster=True) as redis_url, ModelServer() as model:
            create_table(boto3.client("dynamodb", region_name=REGION, endpoint_url=moto), TABLE)
            env.update({
                "TABLE_NAME": TABLE, "AWS_REGION": REGION, "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing", "DYNAMODB_ENDPOINT_URL": moto, "REDIS_URL": redis_url,
                "AUTH_MODE": "hs256", "JWT_SECRET": TEST_SECRET, "LLM_API_KEY": "test-key",
                "LLM_BASE_URL": model.base_url, "LOG_LEVEL": "WARNING",
            })
            task = Task(staged, runtime, command, env, Path(work) / "task.log")
            try:
                task.wait_healthy()
                model.enqueue(ScriptedTurn(text=["Hello."]))
                turn = httpx.post(f"{task.url}/api/v1/agent", json=body("th-held", "run-held", "hi"),
                                  headers=bearer(), timeout=60)
                turn.raise_for_status()
                time.sleep(2)
                base_rss = _rss_mb(task.proc.pid)
                url = f"{task.url}/api/v1/threads/th-held/events"
                open_rss, held_rss, held_cpu = asyncio.run(_hold(url, followers, seconds, task.proc.pid))
            finally:
                task.stop()
    return HeldFollowersResult(followers, seconds, base_rss, open_rss, held_rss, held_cpu)


def main(argv: Sequence[str] | None = None) -> HeldFollowersResult:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--followers", type=int, default=1000, help="idle follow streams to open (default 1000)")
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to hold them (default 60)")
    args = parser.parse_args(argv)
    result = measure(args.followers, args.seconds)
    print(result.markdown())
    return result


if __name__ == "__main__":
    main()
