"""The folder every function is built from (``scripts/stage_lambda_src.sh``, template.yaml ``CodeUri``) holds the
deployed code and nothing else: no dev or evaluation tooling, and no deployed module that reaches for it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
# Module names that mark tooling: the local runner, the evaluation and regression commands, the preflight check and
# what the evaluation commands share. None of them belongs in a function.
TOOLING_NAMES = {
    "devtools",
    "dev_tokens",
    "local",
    "evaluation",
    "memory_evaluation",
    "regression",
    "cases",
    "sizes",
    "preflight",
    "harness",
    "token",
}
IMPORTS_DEVTOOLS = re.compile(r"^\s*(from|import)\s+devtools\b", re.MULTILINE)


@pytest.fixture(scope="module")
def staged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("lambda-src") / "src"
    subprocess.run(
        ["bash", str(REPO_ROOT / "scripts" / "stage_lambda_src.sh"), str(out)],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return out


def modules(root: Path) -> list[tuple[str, ...]]:
    return [path.relative_to(root).with_suffix("").parts for path in sorted(root.rglob("*.py"))]


def test_the_staged_folder_holds_the_three_deployed_packages_and_the_requirements(staged: Path) -> None:
    # WHEN the folder is staged as the build stages it
    # THEN it holds exactly the deployed packages and the generated requirements file
    assert sorted(p.name for p in staged.iterdir()) == ["functions", "requirements.txt", "shared", "tool_plugins"]
    # AND the handlers template.yaml names are in it
    assert (staged / "functions" / "agent_api" / "run.sh").is_file()
    assert (staged / "functions" / "memory_extract" / "handler.py").is_file()


def test_no_tooling_module_is_staged(staged: Path) -> None:
    # GIVEN the tooling modules that exist in the repository
    assert (REPO_ROOT / "devtools" / "local" / "runner.py").is_file()
    # WHEN the folder is staged
    tooling = [".".join(parts) for parts in modules(staged) if TOOLING_NAMES & set(parts)]
    # THEN no module of the local runner, the evaluation, regression or preflight commands is in it
    assert tooling == []
    assert not (staged / "devtools").exists()


def test_no_staged_module_imports_the_tooling(staged: Path) -> None:
    # WHEN every staged Python file is read
    offenders = [
        str(path.relative_to(staged))
        for path in sorted(staged.rglob("*.py"))
        if IMPORTS_DEVTOOLS.search(path.read_text(encoding="utf-8"))
    ]
    # THEN none imports devtools, which the functions do not ship (it would fail at import time in Lambda)
    assert offenders == []


def test_the_staged_requirements_are_the_runtime_lock_every_line_pinned_with_hashes(staged: Path) -> None:
    from devtools.locks import pins, requirement_problems

    # WHEN the folder is staged
    shipped = (staged / "requirements.txt").read_text(encoding="utf-8")
    # THEN its requirements.txt is the locked runtime set, which sam build installs with hash checking
    assert shipped == (REPO_ROOT / "requirements" / "runtime.txt").read_text(encoding="utf-8")
    # AND every requirement is pinned with == and carries its hashes, and no line names an index
    assert requirement_problems(shipped) == []
    assert {"openai", "fastapi", "boto3", "httpx2"} <= set(pins(shipped))
