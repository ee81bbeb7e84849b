"""The deployed artifact, built once per session as ``sam build`` builds it (``tests/support/shipped_artifact.py``).

Without Python 3.12 (the functions' runtime) the tier skips with the reason, except under CI (``CI`` set and not
false), where that is a failure: CI must never pass by skipping what ships.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import shipped_artifact
from tests.support.ci import running_in_ci
from tests.support.shipped_artifact import Runtime


@pytest.fixture(scope="session")
def staged_artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return shipped_artifact.stage(tmp_path_factory.mktemp("ships") / "lambda-src")


@pytest.fixture(scope="session")
def shipped_runtime(staged_artifact: Path) -> Runtime:
    python = shipped_artifact.runtime_python()
    if python is None:
        reason = "python3.12 (the functions' runtime) is not on PATH; set SHIPS_PYTHON to one"
        if running_in_ci():
            pytest.fail(f"CI is set and the ships tier cannot run: {reason}")
        pytest.skip(reason)
    return shipped_artifact.install_requirements(staged_artifact / "requirements.txt", python)
