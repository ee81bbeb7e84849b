"""No import circle among the project's own modules (shared/ and functions/), and the finder sees one when it is
there. Import-linter's layer contracts cover the layers; this covers every module, within a layer too."""

from __future__ import annotations

from pathlib import Path

from tests.support.import_graph import import_cycles, import_graph

ROOT = Path(__file__).resolve().parents[2]


def test_shared_and_functions_have_no_import_circle() -> None:
    graph = import_graph(ROOT, ["shared", "functions"])
    assert len(graph) > 100  # the whole tree was read, not an empty folder
    assert import_cycles(graph) == []


def _package(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def test_an_injected_circle_is_found(tmp_path: Path) -> None:
    # GIVEN a package whose domain module imports the wiring lazily, under TYPE_CHECKING, and relatively
    root = _package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/base.py": "X = 1\n",
            "pkg/wiring.py": "from pkg.domain.store import Store\n",
            "pkg/domain/__init__.py": "",
            "pkg/domain/store.py": (
                "from typing import TYPE_CHECKING\nfrom ..base import X\n"
                "if TYPE_CHECKING:\n    from pkg import wiring\nclass Store: ...\n"
            ),
            "pkg/domain/job.py": "def build():\n    from pkg.domain import store\n",
        },
    )
    graph = import_graph(root, ["pkg"])
    # THEN the circle through the type-only import is reported, and the acyclic modules are not
    assert graph["pkg.domain.store"] == {"pkg.base", "pkg.wiring"}
    assert import_cycles(graph) == [["pkg.domain.store", "pkg.wiring"]]
    # WHEN the domain module stops importing the wiring, THEN there is no circle
    (root / "pkg/domain/store.py").write_text("from ..base import X\nclass Store: ...\n", encoding="utf-8")
    assert import_cycles(import_graph(root, ["pkg"])) == []


def test_a_longer_circle_is_reported_once_with_all_its_modules() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e2"}, "e2": {"e"}}
    assert import_cycles(graph) == [["a", "b", "c"], ["e", "e2"]]
