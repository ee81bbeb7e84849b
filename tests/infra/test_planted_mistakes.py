"""Each planted mistake is written into a copy of template.yaml, and the gate must fail on it.

These are the mistakes that ``sam validate``, ``sam validate --lint`` and cfn-lint (even on the expansion) let
through; only the checks on the expanded template catch them. The fast tests run each check on its planted copy;
the slow ones show cfn-lint passing every copy and the whole gate script failing at the template checks.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.sam_tools import REPO_ROOT, SamTools

from . import template_checks as checks
from .planted_mistakes import MISTAKES, PlantedMistake

MISTAKE_IDS = [mistake.name for mistake in MISTAKES]


@pytest.mark.parametrize("mistake", MISTAKES, ids=MISTAKE_IDS)
def test_the_check_fails_on_the_planted_mistake(
    mistake: PlantedMistake, sam_tools: SamTools, expanded_template: checks.Template, tmp_path: Path
) -> None:
    # GIVEN the check passes on the real template
    assert mistake.check(expanded_template) == []
    # WHEN the mistake is planted and the copy expanded
    expanded = sam_tools.expand(mistake.plant(tmp_path), tmp_path / "expanded.json")
    # THEN the same check reports it
    violations = mistake.check(expanded)
    assert any(violation.startswith(mistake.expected_violation) for violation in violations), violations


@pytest.mark.slow
def test_the_linters_miss_every_planted_mistake(sam_tools: SamTools, tmp_path: Path) -> None:
    """Why the checks exist: cfn-lint (what ``sam validate --lint`` runs) passes every planted copy."""
    # GIVEN each planted copy and its expansion
    files: list[Path] = []
    for mistake in MISTAKES:
        directory = tmp_path / mistake.name
        directory.mkdir()
        planted = mistake.plant(directory)
        files += [planted, directory / "expanded.json"]
        sam_tools.expand(planted, files[-1])
    # WHEN cfn-lint reads them all (one process: its start-up dominates)
    result = sam_tools.run(sam_tools.cfn_lint, *files)
    # THEN it finds nothing
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_the_gate_script_fails_on_a_planted_mistake_at_the_template_checks(sam_tools: SamTools, tmp_path: Path) -> None:
    # GIVEN the STREAM mistake (the one that silently buffers every SSE stream)
    mistake = MISTAKES[0]
    # WHEN the whole gate script runs on it
    result = sam_tools.run(
        "bash",
        REPO_ROOT / "scripts" / "sam_gate.sh",
        mistake.plant(tmp_path),
        extra_env={"SAM_GATE_OUT_DIR": str(tmp_path / "out"), "SAM_GATE_SKIP_BUILD": "1"},
    )
    # THEN sam validate, --lint and cfn-lint on the expansion passed, and the template checks failed the gate
    assert "== [lambda] template checks on the expansion" in result.stdout, result.stdout + result.stderr
    assert result.returncode != 0, result.stdout
    assert mistake.expected_violation in result.stdout
    assert "sam_gate: all steps passed" not in result.stdout
