"""The playground's edit and regenerate buttons and sibling arrows in headless chromium, against the app with a
scripted model server (docs/protocols/agent/run-agent-input.md §3.3)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import pytest

from tests.support.model_server import ModelServer, ScriptedTurn

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

Serve = Callable[..., AbstractContextManager[str]]


def wait_idle(view: Any, runs: int) -> None:
    view.page.wait_for_function(
        """(n) => [...document.querySelectorAll('[data-testid=runs] .run')]
             .filter((r) => !r.querySelector('strong').textContent.startsWith('memory run'))
             .filter((r) => r.dataset.status).length >= n""",
        arg=runs,
    )
    view.page.wait_for_selector("body[data-running=false]")


def bubbles(view: Any) -> list[tuple[str, str]]:
    return [
        (str(li.get_attribute("data-role")), str(li.text_content()))
        for li in view.page.locator("[data-testid=messages] > li.msg").all()
    ]


def position(bubble: Any) -> str:
    return str(bubble.locator("[data-testid=sibling-position]").get_attribute("data-position"))


def said(request: dict[str, Any]) -> list[str]:
    return [str(m.get("content") or "").split("[/run notes]", 1)[-1].strip() for m in request["messages"][1:]]


def test_regenerate_edit_and_the_sibling_arrows(playground: Serve, open_page: Callable[[str], Any]) -> None:
    with ModelServer() as model:
        model.enqueue(ScriptedTurn(text=["Paris."]), ScriptedTurn(text=["It is Paris."]), ScriptedTurn(text=["Rome."]))
        with playground(llm_base_url=model.base_url, llm_api_key="k") as url:
            view = open_page(f"{url}/playground")
            box = view.page.locator("#message-input")
            box.fill("Capital of France?")
            box.press("Enter")
            wait_idle(view, 1)
            # WHEN the answer is regenerated
            view.page.locator("[data-testid=messages] .msg.assistant [data-testid=regenerate]").click()
            wait_idle(view, 2)
            view.page.wait_for_selector("[data-testid=messages] .msg.assistant [data-testid=sibling-position]")
            # THEN the new answer replaces the old one, "2 / 2", and the model saw only the question
            assert bubbles(view) == [("user", "Capital of France?"), ("assistant", "It is Paris.")]
            answer = view.page.locator("[data-testid=messages] .msg.assistant")
            assert position(answer) == "2 / 2"
            assert said(model.requests[1]) == ["Capital of France?"]
            view.screenshot("regenerated")
            # WHEN the user steps back to the first answer
            answer.locator("[data-testid=sibling-prev]").click()
            view.page.wait_for_selector("body[data-running=false]")
            view.page.wait_for_function(
                "() => document.querySelector('[data-testid=messages] .msg.assistant')?.textContent === 'Paris.'"
            )
            assert position(view.page.locator("[data-testid=messages] .msg.assistant")) == "1 / 2"
            # WHEN the question is edited
            view.page.locator("[data-testid=messages] .msg.user [data-testid=edit-message]").click()
            assert box.input_value() == "Capital of France?"
            assert view.page.locator("[data-testid=editing]").is_visible()
            box.fill("Capital of Italy?")
            box.press("Enter")
            wait_idle(view, 3)
            view.page.wait_for_selector("[data-testid=messages] .msg.user [data-testid=sibling-position]")
            # THEN the conversation is the edited branch, and the model saw nothing of the old one
            assert bubbles(view) == [("user", "Capital of Italy?"), ("assistant", "Rome.")]
            assert position(view.page.locator("[data-testid=messages] .msg.user")) == "2 / 2"
            assert said(model.requests[2]) == ["Capital of Italy?"]
            view.screenshot("edited")
