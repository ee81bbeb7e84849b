"""The streams service's task (template.yaml ``StreamHost``) started from the staged artifact as ECS starts it: the
task definition's command and environment (:func:`task_definition`) in the staged folder, on the functions' Python
with only the installed runtime set (:class:`Task`). Used by the ships tier and ``bench.held_followers``."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import yaml  # type: ignore[import-untyped]  # mypy follows bench.held_followers here

from tests.support import shipped_artifact
from tests.support.redis_server import free_port
from tests.support.shipped_artifact import Runtime

REPO = Path(__file__).resolve().parents[2]


class _Intrinsics(yaml.SafeLoader):  # type: ignore[misc]
    """Reads template.yaml keeping each intrinsic function as ``(name, argument)``."""


def _intrinsic(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> tuple[str, Any]:
    return suffix, loader.construct_scalar(node) if isinstance(node, yaml.ScalarNode) else None


_Intrinsics.add_multi_constructor("!", _intrinsic)


def task_definition() -> tuple[list[str], dict[str, str], int]:
    """The streams container's command, environment and port as template.yaml gives them: literal values, and each
    ``!Ref`` of a parameter at its default; what the deployment supplies (a table name, the cache address) is left
    for the test to point at its own resources."""
    template: dict[str, Any] = yaml.load((REPO / "template.yaml").read_text(encoding="utf-8"), Loader=_Intrinsics)
    parameters = template["Parameters"]
    (container,) = template["Resources"]["StreamHostTaskDefinition"]["Properties"]["ContainerDefinitions"]
    env: dict[str, str] = {}
    for item in container["Environment"]:
        value = item["Value"]
        if isinstance(value, tuple) and value[0] == "Ref" and value[1] in parameters:
            value = parameters[value[1]].get("Default", "")
        if isinstance(value, str | int | float | bool):
            env[item["Name"]] = str(value)
    return container["Command"], env, int(container["PortMappings"][0]["ContainerPort"])


class Task:
    """The container's command in the staged folder (the image's WORKDIR), on a free port."""

    def __init__(self, staged: Path, runtime: Runtime, command: list[str], env: dict[str, str], log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**env, "PORT": str(self.port), "HOST": "127.0.0.1", "PYTHON": str(runtime.python)}
        self.log = log
        self._log = open(log, "wb")  # closed in stop()
        self.proc = subprocess.Popen(
            [str(staged / command[0]), *command[1:]],
            env=shipped_artifact.process_environment(runtime, staged, env),
            cwd=staged,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def wait_healthy(self, timeout_s: float = 60) -> float:
        """Seconds until ``/healthz`` answers 200, as the target group's health check asks it."""
        started = time.monotonic()
        while time.monotonic() - started < timeout_s:
            if self.proc.poll() is not None:
                raise AssertionError(f"the command exited with {self.proc.returncode}:\n{self.output()[-4000:]}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=0.5).status_code == 200:
                    return time.monotonic() - started
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"not healthy within {timeout_s} s:\n{self.output()[-4000:]}")

    def command_line(self) -> list[str]:
        return Path(f"/proc/{self.proc.pid}/cmdline").read_bytes().decode().split("\0")

    def output(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log.read_text(encoding="utf-8", errors="replace")

    def stop(self) -> int:
        self.proc.terminate()  # what ECS sends first when it stops a task
        try:
            code = self.proc.wait(timeout=25)  # within the task definition's StopTimeout (30 s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self._log.close()
        return code
