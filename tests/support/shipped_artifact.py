"""The artifact the functions deploy, built as ``sam build`` builds it and started as Lambda starts it.

- :func:`stage` runs ``scripts/stage_lambda_src.sh``: the code folder and its ``requirements.txt`` (the runtime lock).
- :func:`runtime_python` finds the functions' Python (template.yaml ``Runtime``, 3.12) on this machine.
- :func:`install_requirements` installs that ``requirements.txt`` as ``sam build`` does (``pip install -r
  requirements.txt -t <folder>``, hashes required) into a folder beside a bare venv of the runtime Python: nothing of
  the test venv, no extra, no package the lock does not name. Both are cached outside the repository, keyed by the
  requirements file and the interpreter, so a second run on the same machine reuses them.
- :func:`ShippedProcess` starts one function's process with only that: the runtime Python, ``PYTHONPATH`` of the
  code folder and the installed folder (``/var/task`` holds both on Lambda), and the environment template.yaml sets.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]  # mypy follows bench.held_followers here

REPO = Path(__file__).resolve().parents[2]
RUNTIME_VERSION = (3, 12)
CACHE_ROOT = Path(os.environ.get("AGENT_BACKEND_CACHE") or Path.home() / ".cache" / "agent-backend")
# What the Lambda runtime and the Web Adapter layer set in the environment, or what a tool of this machine set,
# never reaches a shipped process: only what this module passes does.
_KEPT_FROM_HOST = ("PATH", "HOME", "LANG", "TMPDIR", "SSL_CERT_FILE")


def stage(out: Path) -> Path:
    subprocess.run(["bash", str(REPO / "scripts" / "stage_lambda_src.sh"), str(out)], check=True, timeout=120)
    return out


def _candidates() -> Iterator[str]:
    if os.environ.get("SHIPS_PYTHON"):
        yield os.environ["SHIPS_PYTHON"]
    found = shutil.which("python3.12")
    if found:
        yield found
    # pyenv's shim answers only for the active version; its installed 3.12 builds are found directly.
    pyenv_root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    yield from (str(p) for p in sorted((pyenv_root / "versions").glob("3.12*/bin/python3.12"), reverse=True))


def runtime_python() -> str | None:
    """The interpreter of the functions' runtime (template.yaml ``Runtime: python3.12``): ``SHIPS_PYTHON``,
    ``python3.12`` on PATH, or pyenv's newest 3.12 (these machines have one)."""
    for candidate in _candidates():
        done = subprocess.run(
            [candidate, "-c", "import sys; print(sys.version_info[:2] == (3, 12))"],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        if done.returncode == 0 and done.stdout.strip() == "True":
            return candidate
    return None


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


@dataclass(frozen=True)
class Runtime:
    """A bare venv of the runtime Python (``python``) and the folder the locked requirements went into (``deps``)."""

    python: Path
    deps: Path


def install_requirements(requirements: Path, python: str) -> Runtime:
    """Install ``requirements`` as ``sam build`` does, once per file content and interpreter on this machine."""
    version = subprocess.run(
        [python, "-c", "import sys, platform; print(sys.version, platform.machine())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    key = hashlib.sha256(requirements.read_bytes() + version.encode()).hexdigest()[:16]
    home = CACHE_ROOT / f"ships-{key}"
    runtime = Runtime(python=home / "venv" / "bin" / "python", deps=home / "deps")
    with _locked(CACHE_ROOT / ".ships.lock"):
        if (home / ".complete").is_file():
            return runtime
        shutil.rmtree(home, ignore_errors=True)
        subprocess.run([python, "-m", "venv", str(home / "venv")], check=True, timeout=300)
        # sam build: `pip install -r requirements.txt -t <artifact>`; pip checks hashes because the file has them.
        install = [str(runtime.python), "-m", "pip", "install", "--quiet", "--require-hashes", "--no-compile"]
        subprocess.run(
            [*install, "-r", str(requirements), "--target", str(runtime.deps)],
            check=True,
            timeout=900,
        )
        (home / ".complete").touch()
    return runtime


def wheel_problems(requirements: Path, dest: Path) -> str | None:
    """``None`` when every locked package has a wheel for the functions' platform (manylinux aarch64, CPython 3.12);
    otherwise pip's account of what is missing. Downloads into ``dest``, which a later run reuses."""
    target = ["--platform", "manylinux2014_aarch64", "--platform", "manylinux_2_28_aarch64"]
    target += ["--python-version", "3.12", "--implementation", "cp", "--abi", "cp312"]
    download = [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:", "--require-hashes"]
    done = subprocess.run(
        [*download, *target, "-d", str(dest), "-r", str(requirements)],
        capture_output=True,
        text=True,
        check=False,
        timeout=1200,
    )
    return None if done.returncode == 0 else (done.stdout + done.stderr)[-4000:]


class _AnyTag(yaml.SafeLoader):  # type: ignore[misc]
    """Reads template.yaml: an intrinsic function (``!Ref``, ``!Sub``...) is a value the deployment supplies."""


_AnyTag.add_multi_constructor("!", lambda loader, suffix, node: None)


def template_environment(function: str) -> dict[str, str]:
    """The literal environment template.yaml gives ``function`` (Globals, then the function's own); variables whose
    value the deployment supplies (``!Ref``, ``!Sub``) are left for the test to point at its own resources."""
    template: dict[str, Any] = yaml.load((REPO / "template.yaml").read_text(encoding="utf-8"), Loader=_AnyTag)
    merged: dict[str, Any] = {}
    merged.update(template["Globals"]["Function"].get("Environment", {}).get("Variables", {}))
    merged.update(template["Resources"][function]["Properties"].get("Environment", {}).get("Variables", {}))
    return {key: str(value) for key, value in merged.items() if isinstance(value, str | int | float | bool)}


def process_environment(runtime: Runtime, code: Path, env: Mapping[str, str]) -> dict[str, str]:
    """A shipped process's whole environment: the code and the installed folder on ``PYTHONPATH``, ``env``, and a
    few host variables a process needs to run at all."""
    base = {key: os.environ[key] for key in _KEPT_FROM_HOST if key in os.environ}
    return {**base, **env, "PYTHONPATH": f"{code}{os.pathsep}{runtime.deps}", "PYTHONDONTWRITEBYTECODE": "1"}
