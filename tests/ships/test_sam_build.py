"""``sam build`` of the staged folder installs exactly the runtime lock, for arm64, in every function.

This is the deploy path itself (template.yaml ``CodeUri: build/lambda-src``, ``Architectures: [arm64]``): SAM's pip
builder on the runtime's Python 3.12, without Docker. The test reads what it installed: each function's package
versions must be the lock's pins, and its compiled extensions must be aarch64 builds.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.support import shipped_artifact
from tests.support.ci import running_in_ci
from tests.support.sam_tools import REPO_ROOT, SamTools, tools_venv

pytestmark = [pytest.mark.slow]

FUNCTIONS = (
    "StreamingApiFunction",
    "BufferedApiFunction",
    "MemoryFunction",
    "AutomationFunction",
    "SweeperFunction",
    "MigrationFunction",
)
# Lambda's python3.12 on arm64, for the lock's environment markers (the universal lock also lists packages for
# Windows, emscripten and older Pythons).
LAMBDA_ARM64 = {
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "aarch64",
    "python_version": "3.12",
    "python_full_version": "3.12.1",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
}
_DIST_INFO = re.compile(r"^(?P<name>.+)-(?P<version>[^-]+)\.dist-info$")


AARCH64 = 183  # ELF e_machine of arm64 (x86-64 is 62)


def _elf_machine(path: Path) -> int:
    header = path.read_bytes()[:20]
    assert header[:4] == b"\x7fELF", path
    return int.from_bytes(header[18:20], "little")


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def locked_for(lock: str, environment: dict[str, str]) -> dict[str, str]:
    """The lock's pins whose environment marker holds in ``environment``."""
    found: dict[str, str] = {}
    for line in re.sub(r"\\\n", " ", lock).splitlines():
        if not line or line.startswith(("#", " ")):
            continue
        requirement = Requirement(line.split(" --hash", 1)[0].strip())
        if requirement.marker is None or requirement.marker.evaluate(environment):
            (version,) = (spec.version for spec in requirement.specifier)
            found[_normalise(requirement.name)] = version
    return found


def test_sam_build_installs_the_locked_runtime_set_for_arm64_in_every_function(tmp_path: Path) -> None:
    tools = SamTools(tools_venv())
    python = shipped_artifact.runtime_python()
    if not tools.is_installed() or python is None:
        reason = "needs the SAM tools venv (bash scripts/install_sam_tools.sh) and python3.12"
        if running_in_ci():
            pytest.fail(f"CI is set and sam build cannot run: {reason}")
        pytest.skip(reason)
    # GIVEN the folder staged where template.yaml's CodeUri points (a copy of the template beside it)
    staged = shipped_artifact.stage(tmp_path / "build" / "lambda-src")
    template = tmp_path / "template.yaml"
    template.write_text((REPO_ROOT / "template.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    # WHEN sam build runs with the runtime's Python first on PATH, as a build machine would have it
    path = os.pathsep.join([str(Path(python).parent), os.environ.get("PATH", "")])
    cache = shipped_artifact.CACHE_ROOT / "sam-build-cache"
    done = tools.run(
        tools.sam, "build", "-t", template, "--build-dir", tmp_path / "out", "--cache-dir", cache, "--cached",
        extra_env={"PATH": path},
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    expected = locked_for((staged / "requirements.txt").read_text(encoding="utf-8"), LAMBDA_ARM64)
    assert {"openai", "pydantic-core", "httpx2"} <= set(expected)
    for function in FUNCTIONS:
        built = tmp_path / "out" / function
        installed = {
            _normalise(m["name"]): m["version"]
            for m in (_DIST_INFO.match(p.name) for p in built.iterdir() if p.name.endswith(".dist-info"))
            if m
        }
        # THEN the function holds the lock's packages at the lock's versions, and nothing else
        assert installed == expected, function
        # AND its compiled extensions are built for arm64
        extensions = list(built.rglob("*.so"))
        assert extensions, function
        assert {p.name: _elf_machine(p) for p in extensions} == {p.name: AARCH64 for p in extensions}
        # AND the code is the staged code
        assert (built / "functions" / "agent_api" / "run.sh").is_file()
