"""Small modules and short functions in the deployed code: no module in shared/ or functions/ is over 450 lines,
no function (nested ones and methods included) over 60, counted from its ``def`` line to its last line."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("shared", "functions")
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 60


def _modules(root: Path) -> Iterator[tuple[str, str]]:
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            yield path.relative_to(root).as_posix(), path.read_text(encoding="utf-8")


def oversized(root: Path, exempt: frozenset[str] = frozenset()) -> list[str]:
    """Every module over ``MAX_MODULE_LINES`` and function over ``MAX_FUNCTION_LINES`` lines, as ``path: what``."""
    found: list[str] = []
    for name, text in _modules(root):
        if name in exempt:
            continue
        lines = len(text.splitlines())
        if lines > MAX_MODULE_LINES:
            found.append(f"{name}: module of {lines} lines")
        for node in ast.walk(ast.parse(text, filename=name)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    found.append(f"{name}:{node.lineno}: function {node.name} of {length} lines")
    return found


def test_no_module_or_function_of_shared_and_functions_is_over_its_size() -> None:
    assert sum(1 for _ in _modules(ROOT)) > 100  # the whole tree was read, not an empty folder
    assert oversized(ROOT) == []


def test_an_oversized_module_and_function_are_found(tmp_path: Path) -> None:
    # GIVEN a module of 451 lines and, in another, a method of 61 lines; a third, exempt, is as long
    def body(lines: int, indent: str) -> str:
        return "".join(f"{indent}x{i} = {i}\n" for i in range(lines))

    files = {
        "shared/big.py": "X = 1\n" * (MAX_MODULE_LINES + 1),
        "functions/long.py": "class A:\n    async def run(self):\n" + body(MAX_FUNCTION_LINES, "        "),
        "shared/fits.py": "def short():\n" + body(MAX_FUNCTION_LINES - 1, "    "),
        "shared/exempt.py": "X = 1\n" * (MAX_MODULE_LINES + 1),
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    # WHEN the tree is checked with the exempt module left out
    found = oversized(tmp_path, frozenset({"shared/exempt.py"}))
    # THEN the long module and the long method are reported, the short function and the exempt module are not
    assert found == [
        "shared/big.py: module of 451 lines",
        "functions/long.py:2: function run of 61 lines",
    ]
