"""The playground's shared-state panel in headless chromium: the thread's state from the history API, the run's
STATE_SNAPSHOT, and each STATE_DELTA as it arrives (a scripted model that patches the state twice)."""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import pytest

from tests.support.model_server import ModelServer, ScriptedToolCall, ScriptedTurn

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

Serve = Callable[..., AbstractContextManager[str]]


def patch_turn(call_id: str, patch: list[dict[str, Any]]) -> ScriptedTurn:
    arguments = json.dumps({"patch": patch})
    return ScriptedTurn(tool_calls=[ScriptedToolCall(name="update_state", arguments=arguments, id=call_id)])


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


def shown_state(view: Any) -> Any:
    return json.loads(str(view.page.locator("[data-testid=state]").text_content()))


def test_the_state_panel_shows_the_snapshot_and_each_delta_and_the_state_after_reload(
    playground: Serve, open_page: Callable[[str], Any]
) -> None:
    plan = [{"description": "Research", "status": "pending"}, {"description": "Draft", "status": "pending"}]
    first_patch = [{"op": "add", "path": "/steps", "value": plan}]
    second_patch = [{"op": "replace", "path": "/steps/0/status", "value": "completed"}]
    done = {"steps": [{**plan[0], "status": "completed"}, plan[1]]}
    with ModelServer() as model:
        model.enqueue(patch_turn("c1", first_patch), patch_turn("c2", second_patch), ScriptedTurn(text=["On it."]))
        with playground(llm_base_url=model.base_url, llm_api_key="k") as url:
            view = open_page(f"{url}/playground")
            # WHEN a message starts a run whose model changes the state twice
            send_and_wait(view, "write the report", runs=1)
            view.screenshot("after-run")
            # THEN the panel lists both deltas, in order, as they arrived, and shows the state they made
            deltas = view.page.locator("[data-testid=state-deltas] li").all_text_contents()
            assert [json.loads(d) for d in deltas] == [first_patch, second_patch]
            assert shown_state(view) == done
            assert "version 2" in str(view.page.locator("[data-testid=state-version]").text_content())
            # AND the run's timeline shows the snapshot first and a STATE_DELTA per change
            kinds = view.page.eval_on_selector_all(
                "[data-testid=runs] .run:last-child .ev", "(rows) => rows.map((r) => r.dataset.type)"
            )
            assert kinds[:2] == ["RUN_STARTED", "STATE_SNAPSHOT"] and kinds.count("STATE_DELTA") == 2
            # WHEN the page is reloaded and the thread opened again
            thread = str(view.page.locator("[data-testid=thread-id]").text_content())
            view.page.reload()
            view.page.wait_for_selector("body[data-ready=true]")
            view.page.locator(f"[data-testid=thread-list] button[data-thread-id='{thread}']").click()
            view.page.wait_for_function(
                "() => document.querySelector('[data-testid=state-version]').textContent.includes('version 2')"
            )
            # THEN the panel shows the stored state from the history API
            assert shown_state(view) == done
            view.screenshot("after-reload")
