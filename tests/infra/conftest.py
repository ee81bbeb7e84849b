"""Fixtures for the offline template gate.

Without the SAM tools venv the tests skip with the reason and the install command, except under CI (``CI`` set
and not false), where a missing venv is a failure: CI must never pass by skipping the gate.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.ci import running_in_ci
from tests.support.sam_tools import TEMPLATE_PATH, SamTools, tools_venv


@pytest.fixture(scope="session")
def sam_tools() -> SamTools:
    tools = SamTools(tools_venv())
    if not tools.is_installed():
        reason = f"SAM tools venv not found at {tools.venv}; install it with: bash scripts/install_sam_tools.sh"
        if running_in_ci():
            pytest.fail(f"CI is set and the offline SAM gate cannot run: {reason}")
        pytest.skip(reason)
    return tools


@pytest.fixture(scope="session")
def expanded_template_path(sam_tools: SamTools, tmp_path_factory: pytest.TempPathFactory) -> Path:
    output = tmp_path_factory.mktemp("expanded") / "template.expanded.json"
    sam_tools.expand(TEMPLATE_PATH, output)
    return output


@pytest.fixture(scope="session")
def expanded_template(expanded_template_path: Path) -> dict[str, Any]:
    expanded: dict[str, Any] = json.loads(expanded_template_path.read_text(encoding="utf-8"))
    return expanded
