"""A real redis-server started for the tests on a free loopback port, stopped after (never someone else's)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def redis_server(*, cluster: bool = False) -> Iterator[str]:
    """A fresh redis-server; with ``cluster`` a one-node cluster owning every slot, which speaks the cluster
    protocol (MOVED, CLUSTER SLOTS, no SELECT) as ElastiCache Serverless does."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server is not installed: `make test` installs it (apt-get install redis-server)")
    port = _cluster_port() if cluster else free_port()
    workdir = tempfile.mkdtemp(prefix="redis-test-")
    args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", workdir]
    if cluster:
        args += ["--cluster-enabled", "yes", "--cluster-config-file", f"{workdir}/nodes.conf"]
    proc = subprocess.Popen(
        args,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2) as conn:
                    conn.sendall(b"PING\r\n")
                    if conn.recv(16).startswith(b"+PONG"):
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("redis-server did not start")
            time.sleep(0.05)
        if cluster:
            _own_every_slot(port)
            yield f"redis://127.0.0.1:{port}"
        else:
            yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(workdir, ignore_errors=True)


def _cluster_port() -> int:
    """A free port whose cluster-bus port (port + 10000) is a valid port and free too."""
    for _ in range(100):
        port = free_port()
        if port + 10000 > 65535:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port pair for a cluster node")


def _own_every_slot(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=2) as conn:
        conn.sendall(b"CLUSTER ADDSLOTSRANGE 0 16383\r\n")
        if not conn.recv(64).startswith(b"+OK"):
            raise RuntimeError("could not assign cluster slots")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            conn.sendall(b"CLUSTER INFO\r\n")
            if b"cluster_state:ok" in conn.recv(4096):
                return
            time.sleep(0.05)
    raise RuntimeError("the one-node cluster did not become ready")
