"""The locked dependency sets: what ``make dev``, ``make test`` and the deployed functions install.

``pyproject.toml`` keeps the ranges (the policy); ``requirements/*.txt`` pin every package of a set to one version
with the hashes of its files (what runs):

- ``runtime.txt``: ``[project].dependencies``, the functions' set; ``scripts/stage_lambda_src.sh`` copies it as the
  artifact's ``requirements.txt``, so ``sam build`` installs exactly it;
- ``local.txt``: runtime plus the ``local`` extra (``make dev``);
- ``test.txt``: runtime plus the ``test`` extra (``make test``);
- tool sets, each from its own ``requirements/<name>.in``, for tools that live in venvs of their own because their
  pins clash with the app's: ``audit.txt`` (pip-audit, ``make audit``) and ``checkov.txt`` (the template scan of
  the offline gate, ``scripts/install_checkov.sh``).

The locks are made by ``uv pip compile --universal --generate-hashes``: one file serves every platform and Python
the project supports (``requires-python``), so the x86_64 test venv on 3.11 and the arm64 functions on 3.12 install
the same versions. ``uv.lock`` is not used because it records the address of the index each package came from; these
files carry no index address, so they install behind any mirror that serves the same files.

The test set is resolved first and the other two are resolved with it as constraints: a package that two sets share
has one version in all three, so what the tests ran is what ships.

Each file records a digest of the inputs it was made from (``requires-python``, the dependencies and the extras).
``check`` compares it with ``pyproject.toml`` without any network: ``make dev`` and ``make test`` run it first and
stop with the command to run when a range changed and the lock did not follow.

Usage (stdlib only, so it runs before any venv exists)::

    python3 -m devtools.locks check            # exit 1 with the reasons when a lock is stale or malformed
    python3 -m devtools.locks compile          # re-lock after a change in pyproject.toml, keeping other pins
    python3 -m devtools.locks compile --upgrade  # re-lock to the newest versions the ranges allow
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCK_DIR = ROOT / "requirements"
DIGEST_PREFIX = "# inputs-sha256: "
COMPILE_COMMAND = "make lock"
# The lowest Python the project supports: a universal lock made for it covers every newer one (the functions run 3.12).
LOCK_PYTHON = "3.11"
# Resolved in this order; each later set takes the first one's pins as constraints.
SETS: dict[str, tuple[str, ...]] = {"test": ("test",), "runtime": (), "local": ("local",)}
# Tools with a venv of their own, each locked from requirements/<name>.in.
TOOL_SETS = ("audit", "checkov")

_PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;\\]+)")


def lock_path(name: str, lock_dir: Path = LOCK_DIR) -> Path:
    return lock_dir / f"{name}.txt"


def inputs_digest(pyproject: Path = ROOT / "pyproject.toml") -> str:
    """A digest of everything in ``pyproject.toml`` that a resolution depends on."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    inputs = {
        "requires-python": project.get("requires-python", ""),
        "dependencies": project.get("dependencies", []),
        "optional-dependencies": project.get("optional-dependencies", {}),
        "lock-python": LOCK_PYTHON,
    }
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


def tool_inputs_digest(name: str, lock_dir: Path = LOCK_DIR) -> str:
    source = (lock_dir / f"{name}.in").read_text(encoding="utf-8")
    return hashlib.sha256(f"{LOCK_PYTHON}\n{source}".encode()).hexdigest()


def recorded_digest(text: str) -> str | None:
    for line in text.splitlines():
        if line.startswith(DIGEST_PREFIX):
            return line[len(DIGEST_PREFIX) :].strip()
    return None


def pins(text: str) -> dict[str, str]:
    """Package name (normalised) to pinned version, for every requirement line of a lock."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        match = _PIN.match(line)
        if match:
            found[re.sub(r"[-_.]+", "-", match["name"]).lower()] = match["version"]
    return found


def requirement_problems(text: str) -> list[str]:
    """What makes a lock unfit to install with ``--require-hashes`` behind any index: a requirement that is not an
    exact pin, a pin without a hash, or an option that names an index or a file location."""
    problems: list[str] = []
    # A requirement continues over lines ending in a backslash; join them first.
    logical = re.sub(r"\\\n", " ", text)
    for line in logical.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.startswith("-") or "://" in stripped:
            problems.append(f"option or address in a lock: {stripped[:80]}")
            continue
        if not _PIN.match(stripped):
            problems.append(f"not pinned with ==: {stripped[:80]}")
        elif "--hash=sha256:" not in stripped:
            problems.append(f"pinned without a hash: {stripped[:80]}")
    return problems


def check(pyproject: Path = ROOT / "pyproject.toml", lock_dir: Path = LOCK_DIR) -> list[str]:
    """Every reason the locks do not match ``pyproject.toml`` or each other; empty when they are current."""
    project_digest = inputs_digest(pyproject)
    problems: list[str] = []
    texts: dict[str, str] = {}
    for name in (*SETS, *TOOL_SETS):
        path = lock_path(name, lock_dir)
        if not path.is_file():
            problems.append(f"{path.name} is missing")
            continue
        text = path.read_text(encoding="utf-8")
        source = "pyproject.toml" if name in SETS else f"{name}.in"
        want = project_digest if name in SETS else tool_inputs_digest(name, lock_dir)
        if recorded_digest(text) != want:
            problems.append(f"{path.name} was made from other inputs than {source} has now")
        problems += [f"{path.name}: {p}" for p in requirement_problems(text)]
        if name in SETS:
            texts[name] = text
    if "runtime" in texts:
        runtime = pins(texts["runtime"])
        for name, text in texts.items():
            other = pins(text)
            for package, version in runtime.items():
                if other.get(package, version) != version:
                    problems.append(f"{package} is {version} in runtime.txt but {other[package]} in {name}.txt")
    return problems


def compile_locks(uv: str, *, upgrade: bool, lock_dir: Path = LOCK_DIR) -> None:
    """Re-lock every set with ``uv pip compile``; without ``upgrade`` uv keeps each existing pin the ranges allow."""
    lock_dir.mkdir(parents=True, exist_ok=True)
    first = next(iter(SETS))
    jobs: list[tuple[str, list[str], str]] = []
    for name, extras in SETS.items():
        args = ["pyproject.toml", *(arg for extra in extras for arg in ("--extra", extra))]
        if name != first:
            args += ["--constraint", str(lock_path(first, lock_dir).relative_to(ROOT))]
        jobs.append((name, args, inputs_digest()))
    for name in TOOL_SETS:
        jobs.append((name, [str((lock_dir / f"{name}.in").relative_to(ROOT))], tool_inputs_digest(name, lock_dir)))
    for name, args, digest in jobs:
        out = lock_path(name, lock_dir)
        command = [uv, "pip", "compile", *args, "--universal", "--python-version", LOCK_PYTHON, "--generate-hashes"]
        command += ["--quiet", "--custom-compile-command", COMPILE_COMMAND, "-o", str(out.relative_to(ROOT))]
        if upgrade:
            command.append("--upgrade")
        subprocess.run(command, cwd=ROOT, check=True)
        text = out.read_text(encoding="utf-8")
        if text.startswith(DIGEST_PREFIX):  # uv keeps a header it did not write; ours is replaced
            text = text.split("\n", 1)[1]
        out.write_text(f"{DIGEST_PREFIX}{digest}\n{text}", encoding="utf-8")
    problems = check(lock_dir=lock_dir)
    if problems:
        raise SystemExit("the new locks are not usable:\n" + "\n".join(problems))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m devtools.locks", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("check", help="exit 1 when a lock is stale or malformed")
    make = sub.add_parser("compile", help="re-lock every set with uv")
    make.add_argument("--upgrade", action="store_true", help="move every pin to the newest allowed version")
    make.add_argument("--uv", default="uv", help="the uv executable (default: uv on PATH)")
    args = parser.parse_args(argv)
    if args.command == "compile":
        compile_locks(args.uv, upgrade=args.upgrade)
        return 0
    problems = check()
    if problems:
        print("The locked dependency sets do not match pyproject.toml:", file=sys.stderr)
        for problem in problems:
            print(f"  - {problem}", file=sys.stderr)
        print(f"Re-lock with `{COMPILE_COMMAND}` (docs/deployment.md, 'What the functions ship').", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
