"""Runs the SAM tools venv (.tools/sam-venv) from the project venv's tests.

The tools live in their own venv because aws-sam-cli pins older boto3/pydantic than the application; the tests
therefore call them as subprocesses instead of importing samtranslator.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
TEMPLATE_PATH = REPO_ROOT / "template.yaml"
OFFLINE_REGION = "us-east-1"


def tools_venv() -> Path:
    """Where scripts/install_sam_tools.sh puts the venv (SAM_TOOLS_VENV overrides it)."""
    return Path(os.environ.get("SAM_TOOLS_VENV", REPO_ROOT / ".tools" / "sam-venv"))


def offline_env() -> dict[str, str]:
    """The environment the gate runs with: a region, no telemetry, and no credentials of the developer."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"}
    }
    env["AWS_DEFAULT_REGION"] = OFFLINE_REGION
    env["SAM_CLI_TELEMETRY"] = "0"
    return env


@dataclass(frozen=True)
class SamTools:
    venv: Path

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def sam(self) -> Path:
        return self.venv / "bin" / "sam"

    @property
    def cfn_lint(self) -> Path:
        return self.venv / "bin" / "cfn-lint"

    def is_installed(self) -> bool:
        return all(path.exists() for path in (self.python, self.sam, self.cfn_lint))

    def run(self, *args: str | Path, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """Run a command with the offline environment; never raises on a non-zero exit."""
        return subprocess.run(
            [str(arg) for arg in args],
            cwd=REPO_ROOT,
            env={**offline_env(), **(extra_env or {})},
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )

    def expand(self, template: Path, output: Path) -> dict[str, Any]:
        """Expand a SAM template offline with scripts/expand_template.py and load the result."""
        result = self.run(self.python, REPO_ROOT / "scripts" / "expand_template.py", template, output)
        if result.returncode != 0:
            raise RuntimeError(f"expansion of {template} failed:\n{result.stdout}\n{result.stderr}")
        expanded: dict[str, Any] = json.loads(output.read_text(encoding="utf-8"))
        return expanded
