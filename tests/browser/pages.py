"""A page of the playground in headless chromium, with what its console said, and closing every browser context a test
opened. Helpers the browser tests import; the fixtures that make them stay in conftest.py."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OUTPUT = Path(__file__).resolve().parents[2] / "test-output" / "playground"


@dataclass
class Console:
    """Console errors seen by the page; ``expect`` declares the ones a test provokes on purpose."""

    errors: list[str] = field(default_factory=list)
    expected: list[re.Pattern[str]] = field(default_factory=list)

    def expect(self, pattern: str) -> None:
        self.expected.append(re.compile(pattern))

    def unexpected(self) -> list[str]:
        return [e for e in self.errors if not any(p.search(e) for p in self.expected)]


@dataclass
class BrowserPage:
    page: Any
    console: Console
    name: str

    def screenshot(self, label: str = "") -> Path:
        OUTPUT.mkdir(parents=True, exist_ok=True)
        path = OUTPUT / f"{self.name}{'-' + label if label else ''}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path


def close_all(contexts: list[Any]) -> None:
    while contexts:
        contexts.pop().close()
