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
from collections.abc import Mapping
from pathlib import Path

from tests.support.redis_server import free_port

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
