"""docs/architecture.md's diagram is the code's import graph, and no function of the deployed code is longer than
60 lines (issue: one composition root and a run path that only goes down)."""

from __future__ import annotations

import ast
from pathlib import Path

from devtools import import_diagram

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 60


def test_the_committed_diagram_is_the_one_drawn_from_the_code() -> None:
    assert import_diagram.main(["--check", str(ROOT / "docs" / "architecture.md")]) == 0


def test_a_diagram_missing_an_arrow_is_reported_stale(tmp_path: Path) -> None:
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    arrow = next(line for line in doc.splitlines() if line.startswith("    ") and " --> " in line)
    stale = tmp_path / "architecture.md"
    stale.write_text(doc.replace(arrow + "\n", "", 1), encoding="utf-8")
    assert import_diagram.main(["--check", str(stale)]) == 1
    assert import_diagram.main(["--write", str(stale)]) == 0
    assert import_diagram.main(["--check", str(stale)]) == 0


def test_an_arrow_is_drawn_for_an_import_under_type_checking_and_base_modules_are_one_node() -> None:
    edges = import_diagram.edges()
    assert ("shared.wiring", "shared.adapters") in edges
    assert import_diagram.node_of("shared.models") == "shared (base)"
    assert import_diagram.node_of("shared.memory.store") == "shared.memory"
    assert all("devtools" not in a and "devtools" not in b for a, b in edges)


def long_functions(paths: list[Path], limit: int = MAX_LINES) -> list[str]:
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > limit:
                    found.append(f"{path.as_posix()}:{node.lineno} {node.name} ({length} lines)")
    return found


def test_no_function_of_shared_or_functions_is_longer_than_60_lines() -> None:
    paths = sorted([*(ROOT / "shared").rglob("*.py"), *(ROOT / "functions").rglob("*.py")])
    assert len(paths) > 50
    assert long_functions(paths) == []


def test_the_length_check_catches_a_61_line_function(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(60))
    module = tmp_path / "probe.py"
    module.write_text(f"def too_long() -> None:\n{body}\n", encoding="utf-8")
    assert long_functions([module]) == [f"{module.as_posix()}:1 too_long (61 lines)"]
    assert long_functions([module], limit=61) == []
