"""App instances started exactly as Lambda starts the streaming function: ``functions/agent_api/run.sh`` (uvicorn),
configured only through the environment the template sets. ``freeze`` is what Lambda does to an execution
environment when an invocation's response ends: the process stops (``SIGSTOP``) until ``thaw``.

``LAMBDA_EMULATION_SRC`` points the instances at another source tree (for example a checkout of an older commit),
so the same scenarios can be run against code without a fix to show they fail there.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.support.model_server import ScriptedToolCall, ScriptedTurn
from tests.support.redis_server import free_port
from tests.support.settings import REGION, TABLE, TEST_SECRET
from tests.support.sse import iter_sse_frames
from tests.support.tokens import bearer

REPO = Path(__file__).resolve().parents[2]


def source_tree() -> Path:
    return Path(os.environ.get("LAMBDA_EMULATION_SRC") or REPO)


class Instance:
    """One execution environment: a uvicorn process started by run.sh on its own port."""

    def __init__(self, name: str, env: Mapping[str, str], log_dir: Path) -> None:
        self.name = name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._log = open(log_dir / f"instance-{name}.log", "wb")  # closed in stop()
        full_env = {**os.environ, **env, "PORT": str(self.port), "HOST": "127.0.0.1", "PYTHON": sys.executable}
        self.proc = subprocess.Popen(
            ["bash", str(source_tree() / "functions" / "agent_api" / "run.sh")],
            env=full_env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self.frozen = False

    def wait_ready(self, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"instance {self.name} exited with {self.proc.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as conn:
                    conn.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
                    if b"200" in conn.recv(64):
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"instance {self.name} did not start")

    def freeze(self) -> None:
        """What Lambda does when the invocation's response has ended: the whole process stops."""
        os.kill(self.proc.pid, signal.SIGSTOP)
        self.frozen = True

    def thaw(self) -> None:
        if self.frozen:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.frozen = False

    def stop(self) -> None:
        self.thaw()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


def function_env(
    dynamodb_url: str, redis_url: str, model_url: str, *, table: str = TABLE, secret: str = TEST_SECRET
) -> dict[str, str]:
    """The streaming function's environment as template.yaml sets it, on the test's moto, redis-server and model
    server: HS256 tokens signed with ``secret``, model calls not retried. Tests add what their scenario needs."""
    return {
        "TABLE_NAME": table,
        "AWS_REGION": REGION,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "DYNAMODB_ENDPOINT_URL": dynamodb_url,
        "REDIS_URL": redis_url,
        "LLM_BASE_URL": model_url,
        "LLM_API_KEY": "test-key",
        "LLM_MAX_RETRIES": "0",
        "AUTH_MODE": "hs256",
        "JWT_SECRET": secret,
    }


@contextmanager
def started(env: Mapping[str, str], log_dir: Path, names: Sequence[str] = ("a", "b")) -> Iterator[list[Instance]]:
    """One instance per name on ``env``, each ready (``/healthz``) before the block runs; all stopped after it."""
    instances: list[Instance] = []
    try:
        instances.extend(Instance(name, env, log_dir) for name in names)
        for instance in instances:
            instance.wait_ready()
        yield instances
    finally:
        for instance in instances:
            instance.stop()


def slow_tool_call_turn() -> ScriptedTurn:
    """A model turn that slowly says it checks the clock and calls ``get_current_time`` (``call-1``): a client can
    leave, or an instance be frozen, with the call half streamed."""
    return ScriptedTurn(
        text=["Let ", "me ", "check ", "the ", "clock. "],
        tool_calls=[ScriptedToolCall(name="get_current_time", arguments='{"timezone": "UTC"}', id="call-1")],
        chunk_delay_s=0.4,
        args_chunk_size=3,
    )


async def leave_mid_tool_call(client: httpx.AsyncClient, url: str, payload: dict[str, Any]) -> str:
    """POST a run and go away once its tool call's arguments stream; the stream id of the last event read."""
    last_id = "0-0"
    async with client.stream("POST", f"{url}/api/v1/agent", json=payload, headers=bearer()) as resp:
        async for frame in iter_sse_frames(resp, strict_eof=False):
            if frame.data is None:
                continue
            last_id = frame.id or last_id
            if frame.json()["type"] == "TOOL_CALL_ARGS":
                break
    return last_id
