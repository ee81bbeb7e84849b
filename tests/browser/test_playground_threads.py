"""The playground's thread sidebar and thumbs in headless chromium (issue 45): titles ("Untitled" without one) and the
last message's preview, rename (an inline edit sent as ``PATCH title``), archive (the thread leaves the list), and
thumbs up and down on an answer (``POST``/``DELETE .../feedback``), each checked through the API as well."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import pytest

from tests.support.model_server import ModelServer, ScriptedTurn

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

Serve = Callable[..., AbstractContextManager[str]]


def send_and_wait(view: Any, text: str, runs: int) -> None:
    box = view.page.locator("#message-input")
    box.fill(text)
    box.press("Enter")
    view.page.wait_for_function(
        """(n) => [...document.querySelectorAll('[data-testid=runs] .run')]
             .filter((r) => !r.querySelector('strong').textContent.startsWith('memory run'))
             .filter((r) => r.dataset.status).length >= n""",
        arg=runs,
    )
    view.page.wait_for_selector("body[data-running=false]")


def api_get(view: Any, path: str) -> Any:
    """``GET path`` with the page's own token (the same caller as the page)."""
    return view.page.evaluate(
        """async (path) => {
             const token = sessionStorage.getItem('playground.token');
             const response = await fetch(path, { headers: { Authorization: `Bearer ${token}` } });
             return response.json();
           }""",
        path,
    )


def entry(view: Any, thread: str) -> Any:
    return view.page.locator(f"[data-testid=thread-list] li[data-thread-id='{thread}']")


def answer_feedback(view: Any, thread: str) -> Any:
    items = api_get(view, f"/api/v1/threads/{thread}/history")["items"]
    return next(m for m in items if m["role"] == "assistant").get("feedback")


def test_rename_thumbs_and_archive_in_the_sidebar(playground: Serve, open_page: Callable[[str], Any]) -> None:
    with ModelServer() as model:
        model.enqueue(ScriptedTurn(text=["Lisbon in May is lovely."]), ScriptedTurn(text=["Porto is close."]))
        with playground(llm_base_url=model.base_url, llm_api_key="k") as url:
            view = open_page(f"{url}/playground")
            # GIVEN a thread with one answered question
            send_and_wait(view, "Where should I go in May?", runs=1)
            thread = str(view.page.locator("[data-testid=thread-id]").text_content())
            view.page.wait_for_selector(
                f"[data-testid=thread-list] li[data-thread-id='{thread}'] [data-testid=thread-preview]"
            )
            # THEN it is listed as "Untitled" with its last message's preview
            assert entry(view, thread).locator("[data-testid=thread-title]").text_content() == "Untitled"
            assert (
                entry(view, thread).locator("[data-testid=thread-preview]").text_content() == "Lisbon in May is lovely."
            )

            # WHEN it is renamed inline
            entry(view, thread).locator("[data-testid=rename-thread]").click()
            field = entry(view, thread).locator("[data-testid=rename-input]")
            field.fill("Trip to Lisbon")
            field.press("Enter")
            title = entry(view, thread).locator("[data-testid=thread-title]")
            title.filter(has_text="Trip to Lisbon").wait_for()
            # THEN the list and the API show the new title
            assert api_get(view, f"/api/v1/threads/{thread}")["title"] == "Trip to Lisbon"

            # WHEN the answer gets a thumbs-up
            up = view.page.locator("[data-testid=messages] .msg.assistant [data-testid=thumb-up]")
            assert up.get_attribute("aria-pressed") == "false"
            up.click()
            view.page.wait_for_selector(
                "[data-testid=messages] .msg.assistant [data-testid=thumb-up][aria-pressed=true]"
            )
            view.screenshot("thumbs-up")
            # THEN it is stored: the history's feedback on the answer has score 1, and the down thumb is not pressed
            assert answer_feedback(view, thread)["score"] == 1
            down = view.page.locator("[data-testid=messages] .msg.assistant [data-testid=thumb-down]")
            assert down.get_attribute("aria-pressed") == "false"
            # WHEN the pressed thumb is clicked again  THEN the feedback is removed
            view.page.locator("[data-testid=messages] .msg.assistant [data-testid=thumb-up]").click()
            view.page.wait_for_selector(
                "[data-testid=messages] .msg.assistant [data-testid=thumb-up][aria-pressed=false]"
            )
            assert answer_feedback(view, thread) is None

            # WHEN a second thread is started and the first one archived
            view.page.click("[data-testid=new-thread]")
            view.page.wait_for_function(
                "(t) => document.querySelector('[data-testid=thread-id]').textContent !== t", arg=thread
            )
            send_and_wait(view, "And in June?", runs=1)  # the timeline shows the selected thread's runs
            second = str(view.page.locator("[data-testid=thread-id]").text_content())
            view.page.wait_for_selector(
                f"[data-testid=thread-list] li[data-thread-id='{second}'] [data-testid=thread-preview]"
            )
            entry(view, thread).locator("[data-testid=archive-thread]").click()
            view.page.wait_for_selector(f"[data-testid=thread-list] li[data-thread-id='{thread}']", state="detached")
            view.screenshot("archived")
            # THEN it is gone from the list (the other stays), and the API lists it only among archived threads
            listed = view.page.eval_on_selector_all(
                "[data-testid=thread-list] li", "(li) => li.map((l) => l.dataset.threadId)"
            )
            assert listed == [second]
            assert [t["threadId"] for t in api_get(view, "/api/v1/threads")["items"]] == [second]
            assert api_get(view, f"/api/v1/threads/{thread}")["archived"] is True


def test_a_generated_title_reaches_the_sidebar_without_a_reload(
    playground: Serve, open_page: Callable[[str], Any]
) -> None:
    """The title job (the in-process memory worker, the offline model) titles the thread after its first exchange;
    the page follows the thread's stream and shows the ``thread_title`` event's title. The model streams slowly, so
    the title comes well after the run's end, when the page has already listed its threads again."""
    with playground(chunk_delay_s=0.2) as url:
        view = open_page(f"{url}/playground")
        send_and_wait(view, "Planning a trip to Lisbon in May", runs=1)
        thread = view.page.locator("[data-testid=thread-list] .pick[aria-current=true]").get_attribute("data-thread-id")
        title = view.page.locator("[data-testid=thread-list] .pick[aria-current=true] [data-testid=thread-title]")
        title.filter(has_not_text="Untitled").wait_for(timeout=15_000)
        shown = title.inner_text()
        stored = api_get(view, f"/api/v1/threads/{thread}")
    assert shown == stored["title"] and stored["titleSource"] == "generated"
    assert shown.startswith("Planning a trip")
