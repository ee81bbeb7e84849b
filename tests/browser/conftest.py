"""A real browser on the served playground: Debian's headless chromium driven by Playwright's Python API.

Playwright's own browser download does not work here, so the system browser is launched by path. Each test gets
a fresh browser context; every console error (and uncaught page error) fails the test unless the test declared
that exact message as expected (a 422 the test provokes is logged by the browser as a failed resource load).
Screenshots go to ``test-output/playground/`` (gitignored).
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pytest

from devtools.local.memory_worker import InProcessMemoryWorker
from devtools.local.runner import local_app
from functions.agent_api.playground import STATIC_DIR
from shared.llm.offline import OfflineChatModel
from shared.memory.models import Memory
from shared.memory.trigger import RunCompletedPublisher
from shared.wiring import ServiceOverrides, Services
from tests.support.live_app import serve_app
from tests.support.settings import make_settings

from .pages import BrowserPage, Console, close_all

pytestmark = pytest.mark.browser

CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One browser per test module. Not per session: Playwright's sync API marks this thread's event loop as
    running while it is started, and the async tests of the other modules need that loop."""
    if not (STATIC_DIR / "app.js").is_file():
        pytest.fail("the playground is not built: run `make playground` (make test does)")
    if not Path(CHROMIUM).exists():
        pytest.fail(f"no browser at {CHROMIUM}: install Debian's chromium (make system-deps)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def contexts() -> list[Any]:
    """The browser contexts of a test: closed before its server stops, so the page never sees the server go."""
    return []


@pytest.fixture
def open_page(
    browser: Any, contexts: list[Any], request: pytest.FixtureRequest
) -> Iterator[Callable[[str], BrowserPage]]:
    """``open_page(url)``: a new page on ``url``, ready (the page sets ``body[data-ready]`` when loaded)."""
    opened: list[BrowserPage] = []

    def open_at(url: str) -> BrowserPage:
        context = browser.new_context(viewport={"width": 1440, "height": 900})
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(30_000)
        console = Console()
        page.on("console", lambda msg: console.errors.append(msg.text) if msg.type == "error" else None)
        page.on("pageerror", lambda exc: console.errors.append(f"uncaught: {exc}"))
        view = BrowserPage(page, console, request.node.name)
        opened.append(view)
        page.goto(url)
        page.wait_for_selector("body[data-ready=true]")
        return view

    yield open_at
    close_all(contexts)
    for view in opened:
        assert view.console.unexpected() == [], "console errors during the test"


@pytest.fixture
def playground(store: Any, redis_url: str, contexts: list[Any]) -> Callable[..., AbstractContextManager[str]]:
    """``with playground(chunk_delay_s=..., **settings) as base_url``: the app as ``make dev`` composes it
    (the page, its dev-token route, the in-process memory worker) on a real redis-server and moto."""

    @contextmanager
    def serve(
        chunk_delay_s: float = 0.0, model: Any = None, memories: Sequence[Memory] = (), **settings: Any
    ) -> Iterator[str]:
        # Memory extraction waits for a quiet thread (5 s under make dev): 1 s here.
        config = make_settings(**{"redis_url": redis_url, "playground_enabled": True, "memory_idle_s": 1, **settings})
        overrides = ServiceOverrides(store=store)
        if model is not None or not config.llm_base_url:
            overrides = ServiceOverrides(store=store, model=model or OfflineChatModel(chunk_delay_s=chunk_delay_s))
        services = Services(config, overrides=overrides)
        if memories:
            # Playwright's sync API holds this thread's event loop: seed the store from another thread.
            seeding = threading.Thread(target=lambda: [asyncio.run(services.memories.put(m)) for m in memories])
            seeding.start()
            seeding.join(30)
        if not config.llm_base_url:
            services.use_run_completed_publisher(RunCompletedPublisher(InProcessMemoryWorker(services)))
        with serve_app(services, local_app) as url:
            try:
                yield url
            finally:
                close_all(contexts)

    return serve
