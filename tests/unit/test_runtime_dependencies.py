"""Every distribution a shipped module imports is a runtime dependency that pyproject.toml declares directly.

The test venv has every extra, so an import of a package that only the ``test`` extra (or a dependency of a
dependency) brings works in every test and fails on Lambda, where only the locked runtime set is installed. This
reads every import of the shipped packages from the source (module level and inside functions; not under
``TYPE_CHECKING``, which never runs), keeps those reachable from a Lambda entry point, maps each third-party module to
the distribution that provides it (``importlib.metadata``), and requires that distribution in
``[project].dependencies``. A distribution that arrives only transitively does not count: its parent may drop it in
any release (``httpx`` left ``openai`` that way).
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import re
import sys
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path

from tests.support.import_graph import import_graph, module_files

REPO = Path(__file__).resolve().parents[2]
SHIPPED = ("shared", "functions", "tool_plugins")
# What Lambda starts (template.yaml Handler, run.sh's app factory) and the operators' migration command (it ships
# with the functions); plugins are loaded by name (TOOL_PLUGINS).
ENTRIES = (
    "functions.agent_api.app",
    "functions.agent_api.lambda_buffered",
    "functions.agent_api.sweeper_handler",
    "functions.memory_extract.handler",
    "functions.webhook_delivery.handler",
    "functions.automation.handler",
    "functions.migrate.handler",
    "functions.migrate.cli",
)


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared_runtime_dependencies(pyproject: Path) -> set[str]:
    deps = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["dependencies"]
    return {_normalise(re.split(r"[\[<>=!~; ]", dep, maxsplit=1)[0]) for dep in deps}


def _runtime_imports(tree: ast.AST) -> Iterable[str]:
    """Top-level names of absolute imports that run (imports under ``if TYPE_CHECKING:`` never do)."""
    typing_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            typing_only |= {id(n) for child in node.body for n in ast.walk(child)}
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            yield from (alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module.split(".")[0]


def reachable(graph: Mapping[str, set[str]], entries: Iterable[str]) -> set[str]:
    seen: set[str] = set()
    todo = [e for e in entries if e in graph]
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo += graph[module] - seen
    return seen


def undeclared_imports(root: Path, declared: set[str], entries: Iterable[str]) -> dict[str, list[str]]:
    """``{third-party module: [shipped modules importing it]}`` for each one no declared distribution provides."""
    files = module_files(root, SHIPPED)
    plugins = [m for m in files if m.startswith("tool_plugins")]
    modules = reachable(import_graph(root, SHIPPED), [*entries, *plugins])
    owners = md.packages_distributions()
    ours = {package.split(".")[0] for package in SHIPPED}
    found: dict[str, list[str]] = {}
    for module in sorted(modules):
        tree = ast.parse(files[module].read_text(encoding="utf-8"))
        for top in _runtime_imports(tree):
            if top in sys.stdlib_module_names or top in ours or top == "__future__":
                continue
            if not {_normalise(d) for d in owners.get(top, [])} & declared:
                found.setdefault(top, []).append(module)
    return found


def test_every_module_reachable_from_a_lambda_entry_imports_only_declared_runtime_dependencies() -> None:
    # GIVEN the distributions [project].dependencies declares
    declared = declared_runtime_dependencies(REPO / "pyproject.toml")
    # WHEN every import reachable from the functions' entry points is mapped to its distribution
    found = undeclared_imports(REPO, declared, ENTRIES)
    # THEN each is declared directly (or the module uses what is declared)
    assert found == {}, "imported but not declared as a runtime dependency: " + "; ".join(
        f"{top} (by {', '.join(where[:3])})" for top, where in found.items()
    )


def test_the_walk_reaches_every_entry_and_the_run_path() -> None:
    modules = reachable(import_graph(REPO, SHIPPED), ENTRIES)
    # The entries exist (a renamed handler would silently shrink the check) and the walk follows lazy imports.
    assert set(ENTRIES) <= modules
    assert {"shared.wiring", "shared.llm.openai_chat", "shared.tools.mcp_servers"} <= modules


def test_an_import_that_arrives_only_with_the_test_extra_or_transitively_is_reported(tmp_path: Path) -> None:
    # GIVEN a shipped tree whose start-up imports httpx (test extra only), httpcore2 (a dependency of a dependency)
    # and, under TYPE_CHECKING, pytest (never run)
    for package in SHIPPED:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "functions" / "app.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "import json\n"
        "from shared import helper\n"
        "if TYPE_CHECKING:\n"
        "    import pytest\n"
        "async def warm_up():\n"
        "    import httpx\n"
    )
    (tmp_path / "shared" / "helper.py").write_text("import openai\nimport httpcore2\n")
    (tmp_path / "shared" / "unused.py").write_text("import moto\n")  # reached from no entry
    declared = declared_runtime_dependencies(REPO / "pyproject.toml")
    # WHEN the check runs from that tree's entry
    found = undeclared_imports(tmp_path, declared, ["functions.app"])
    # THEN the two undeclared imports are reported with the module importing them, and nothing else
    assert found == {"httpx": ["functions.app"], "httpcore2": ["shared.helper"]}
