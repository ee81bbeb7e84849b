"""The locked dependency sets (``devtools/locks.py``): current with pyproject.toml, pinned, hashed, index-free, and one
version per package across the sets. ``make dev`` and ``make test`` run the same check before installing."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from devtools.locks import LOCK_DIR, ROOT, SETS, TOOL_SETS, check, lock_path, pins, requirement_problems


def copy_project(tmp_path: Path) -> tuple[Path, Path]:
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    shutil.copytree(LOCK_DIR, tmp_path / "requirements")
    return tmp_path / "pyproject.toml", tmp_path / "requirements"


def test_the_committed_locks_are_current_pinned_hashed_and_agree() -> None:
    # THEN the repository's locks pass every check
    assert check() == []
    # AND the runtime set is the one the functions need, at the same version in every set that holds it
    runtime = pins(lock_path("runtime").read_text(encoding="utf-8"))
    assert {"openai", "fastapi", "boto3", "httpx2", "mcp", "pydantic"} <= set(runtime)
    for name in SETS:
        other = pins(lock_path(name).read_text(encoding="utf-8"))
        assert {p: other[p] for p in runtime} == runtime, name
    # AND the test-only client is not in what ships
    assert "httpx" not in runtime and "httpx" in pins(lock_path("test").read_text(encoding="utf-8"))


def test_a_range_changed_without_relocking_is_refused_with_the_command_to_run(tmp_path: Path) -> None:
    pyproject, locks = copy_project(tmp_path)
    # GIVEN a new runtime dependency in pyproject.toml, and the locks left as they were
    text = pyproject.read_text(encoding="utf-8")
    pyproject.write_text(text.replace('"tiktoken>=0.7",', '"tiktoken>=0.7",\n  "rich>=13",'), encoding="utf-8")
    # THEN every set is reported stale
    problems = check(pyproject, locks)
    assert problems == [f"{name}.txt was made from other inputs than pyproject.toml has now" for name in SETS]
    # AND the command make dev and make test run first exits 1 and names the fix
    (tmp_path / "devtools").mkdir()
    (tmp_path / "devtools" / "__init__.py").write_text("", encoding="utf-8")
    shutil.copy(ROOT / "devtools" / "locks.py", tmp_path / "devtools" / "locks.py")
    done = subprocess.run(
        [sys.executable, "-m", "devtools.locks", "check"], capture_output=True, text=True, check=False, cwd=tmp_path
    )
    assert done.returncode == 1
    assert "runtime.txt was made from other inputs" in done.stderr and "make lock" in done.stderr


def test_a_hand_edited_lock_is_refused(tmp_path: Path) -> None:
    pyproject, locks = copy_project(tmp_path)
    runtime = locks / "runtime.txt"
    text = runtime.read_text(encoding="utf-8")
    # GIVEN a lock whose openai pin was moved by hand, without its hashes being made again
    old = next(line for line in text.splitlines() if line.startswith("openai=="))
    runtime.write_text(text.replace(old, "openai==3.0.0 \\"), encoding="utf-8")
    # THEN the sets no longer agree
    assert any("openai is 3.0.0 in runtime.txt" in p for p in check(pyproject, locks))


def test_requirement_problems_name_unpinned_unhashed_and_index_lines() -> None:
    lock = (
        "# a comment\n"
        "--index-url https://mirror.example/simple\n"
        "fastapi>=0.115\n"
        "openai==3.57.0\n"
        "boto3==1.44.8 \\\n    --hash=sha256:" + "0" * 64 + "\n"
    )
    assert requirement_problems(lock) == [
        "option or address in a lock: --index-url https://mirror.example/simple",
        "not pinned with ==: fastapi>=0.115",
        "pinned without a hash: openai==3.57.0",
    ]


def test_every_tool_set_has_its_source() -> None:
    for name in TOOL_SETS:
        assert (LOCK_DIR / f"{name}.in").is_file() and lock_path(name).is_file()
