"""moto in server mode (``python -m moto.server``) on a free loopback port: one AWS emulation that several
processes share, as several Lambda execution environments share one DynamoDB table.

A session may start one and :func:`reset` it between tests (moto's own ``/moto-api/reset``): a test then starts from
an empty emulation without paying for a new server process."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

from tests.support.redis_server import free_port


@contextmanager
def moto_server() -> Iterator[str]:
    """Start ``python -m moto.server``; yields its endpoint URL; stops it after."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("moto.server did not start")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def reset(url: str) -> None:
    """Forget every resource of the emulation at ``url`` (tables, queues, secrets), as a new server would start."""
    request = urllib.request.Request(f"{url}/moto-api/reset", method="POST")
    with urllib.request.urlopen(request, timeout=30) as response:
        response.read()
