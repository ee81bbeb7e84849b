"""The first command a new user types: ``make dev`` in a fresh clone, with a fresh venv, then the README's curl turn.

The repository is cloned into a temporary folder (its committed tree: what a new user gets), ``make dev`` runs there
with a venv of its own (never the test venv: it installs the locked ``local`` set and nothing else), the test waits
for ``/healthz``, then runs the README's shell block that gets a token and streams a run, exactly as written except
for the port when 8000 is taken on this machine, and stops the server.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.redis_server import free_port
from tests.support.sse import parse_sse
from tests.support.streams import assert_well_formed_run, events_of

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
README_PORT = 8000


def readme_turn(readme: str) -> str:
    """The README's shell block that gets a local token and streams a run."""
    blocks = re.findall(r"```bash\n(.*?)```", readme, flags=re.DOTALL)
    # The first such block: later ones (trying LIMITS) restart the server with other settings.
    return next(b for b in blocks if "make -s token" in b and "/api/v1/agent" in b)


def _port() -> int:
    try:
        with httpx.Client() as client:
            client.get(f"http://127.0.0.1:{README_PORT}/", timeout=0.3)
    except httpx.TransportError:
        return README_PORT  # nothing answers there
    return free_port()


@pytest.fixture
def fresh_clone(tmp_path: Path) -> Path:
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(REPO), str(clone)], check=True, timeout=300)
    return clone


@pytest.fixture
def make_dev(fresh_clone: Path, tmp_path: Path) -> Iterator[tuple[Path, dict[str, str], Path]]:
    port = _port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON"))}
    env.update({"VENV": str(tmp_path / "fresh-venv"), "PORT": str(port), "PATH": _path_without_venv()})
    log = tmp_path / "make-dev.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            ["make", "dev"], cwd=fresh_clone, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            _wait_healthy(proc, port, log)
            yield fresh_clone, env, log
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def _path_without_venv() -> str:
    """PATH without this test venv's bin, so nothing of it is found by name."""
    venv_bin = str(Path(sys.executable).parent)
    return os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p != venv_bin)


def _wait_healthy(proc: subprocess.Popen[bytes], port: int, log: Path, timeout_s: float = 900) -> None:
    """Until ``/healthz`` answers 200; a fresh venv and the playground bundle are built first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"make dev exited with {proc.returncode}:\n{log.read_text(errors='replace')[-6000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=0.5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"make dev did not serve /healthz within {timeout_s} s:\n{log.read_text()[-6000:]}")


def test_make_dev_in_a_fresh_clone_serves_the_readme_curl_turn(make_dev: tuple[Path, dict[str, str], Path]) -> None:
    clone, env, log = make_dev
    # GIVEN make dev serving from a fresh clone with a fresh venv
    assert (Path(env["VENV"]) / ".installed").is_file()
    # WHEN the README's commands run in a second shell, as written
    script = readme_turn((clone / "README.md").read_text(encoding="utf-8"))
    script = script.replace(f"127.0.0.1:{README_PORT}", f"127.0.0.1:{env['PORT']}")
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    # THEN the curl turn streamed a whole run with the offline model's tool call, then the thread's history
    stream, _, history = done.stdout.rpartition("\n")
    events = events_of(stream + "\n")
    assert [f for f in parse_sse(stream + "\n") if f.data is not None], done.stdout[-2000:]
    assert assert_well_formed_run(events)["type"] == "RUN_FINISHED"
    assert [e["toolCallName"] for e in events if e["type"] == "TOOL_CALL_START"] == ["get_current_time"]
    assert '"role":"user"' in history.replace(" ", "") and "Asia/Shanghai" in history, history[:2000]
    # AND the server installed what the lock says, with hashes, and logged no error
    output = log.read_text(encoding="utf-8", errors="replace")
    assert "--require-hashes -r requirements/local.txt" in output
    assert "Traceback" not in output, output[-6000:]
