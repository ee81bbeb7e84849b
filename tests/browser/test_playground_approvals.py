"""The playground shows a server tool call that waits for approval (an AG-UI 1.0 interrupt): the tool, its arguments,
approve / approve with edits / decline, and sends the answer as the next run's ``resume``. In a real browser."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from devtools.local.appconfig_standin import ExtensionStandIn
from shared.adapters.in_memory.config import InMemoryConfigSource
from shared.auth import mint_local_token
from tests.support.model_server import ModelServer, ScriptedToolCall, ScriptedTurn
from tests.support.settings import TEST_SECRET

pytestmark = pytest.mark.browser

LOCAL_TOKEN = mint_local_token(TEST_SECRET, user_id="local-user", tenant_id="local-tenant")
LOCAL_USER = {"Authorization": f"Bearer {LOCAL_TOKEN}"}
DOCUMENT = {
    "profiles": [{
        "name": "chat_playground_approvals",
        "executor": "worker",
        "model": {"name": "qwen3.5-30b-a3b", "thinking": "off"},
        "tool_policy": {"allowlist": ["get_current_time", "units_convert"], "require_approval": ["units_convert"]},
    }],
    "rollout": {"tenants": {"local-tenant": {"chat_default": "chat_playground_approvals"}}},
}
ARGUMENTS = {"value": 5, "from_unit": "km", "to_unit": "mi"}


@pytest.fixture
def approvals_config() -> Iterator[dict[str, Any]]:
    """Settings for the playground: the units_convert plugin, and a runtime configuration (the AppConfig extension's
    stand-in) that sends the local tenant's chats to a profile requiring approval for it."""
    standin = ExtensionStandIn(InMemoryConfigSource(DOCUMENT)).start()
    try:
        yield {
            "tool_plugins": "tool_plugins.units_convert:TOOL",
            "appconfig_application": "agent",
            "appconfig_environment": "local",
            "appconfig_profile": "runtime",
            "appconfig_extension_url": standin.url,
        }
    finally:
        standin.stop()


def send(view: Any, text: str) -> None:
    box = view.page.locator("#message-input")
    box.fill(text)
    box.press("Enter")


def wait_run_ended(view: Any, runs: int) -> None:
    view.page.wait_for_function(
        """(n) => [...document.querySelectorAll('[data-testid=runs] .run')]
             .filter((r) => !r.querySelector('strong').textContent.startsWith('memory run'))
             .filter((r) => r.dataset.status).length >= n""",
        arg=runs,
    )
    view.page.wait_for_selector("body[data-running=false]")


@pytest.mark.parametrize(
    ("button", "edited", "resume", "result"),
    [
        ("approve", None, {"status": "resolved"}, 3.106856),
        ("edit", {"value": 10, "from_unit": "km", "to_unit": "mi"},
         {"status": "resolved", "payload": {"value": 10, "from_unit": "km", "to_unit": "mi"}}, 6.213712),
        ("decline", None, {"status": "cancelled"}, None),
    ],
    ids=["approve", "edit", "decline"],
)
def test_an_approval_interrupt_is_shown_and_answered_with_resume(
    playground: Any, open_page: Any, approvals_config: dict[str, Any], button: str, edited: dict[str, Any] | None,
    resume: dict[str, Any], result: float | None,
) -> None:
    with ModelServer() as model:
        call = ScriptedToolCall(name="units_convert", arguments=json.dumps(ARGUMENTS), id="call_u1")
        model.enqueue(ScriptedTurn(tool_calls=[call]), ScriptedTurn(text=["Here you are."]))
        with playground(llm_base_url=model.base_url, llm_api_key="k", **approvals_config) as url:
            view = open_page(f"{url}/playground")
            requests: list[dict[str, Any]] = []
            view.page.on("request", lambda r: requests.append(r.post_data_json)
                         if r.method == "POST" and r.url.endswith("/api/v1/agent") else None)
            # WHEN the model calls a tool that needs approval
            send(view, "5 km in miles?")
            dialog = view.page.locator("[data-testid=approval-dialog]")
            dialog.wait_for(state="visible")
            # THEN the page shows the tool and its arguments, and the run's interrupt in the timeline
            assert view.page.locator("[data-testid=approval-tool]").text_content() == "units_convert"
            assert json.loads(view.page.locator("[data-testid=approval-args]").input_value()) == ARGUMENTS
            finished = view.page.locator("[data-testid=runs] .run .ev[data-type=RUN_FINISHED]").first
            assert "waiting for approval: units_convert" in str(finished.text_content())
            card = view.page.locator("[data-testid=messages] .tool")
            assert card.locator(".status").text_content() == "waiting for approval"
            view.screenshot("approval")
            # WHEN the person answers (editing the arguments first, for "edit")
            if edited is not None:
                view.page.fill("[data-testid=approval-args]", json.dumps(edited))
            view.page.click(f"[data-testid=approval-{button}]")
            wait_run_ended(view, runs=2)
            view.screenshot()
            # THEN the next run carried the resume for that interrupt, and no other message
            interrupt_id = requests[1]["resume"][0]["interruptId"]
            assert interrupt_id.startswith("int_")
            assert requests[1]["resume"] == [{"interruptId": interrupt_id, **resume}]
            # AND the tool ran (with the edited arguments) or did not, shown on one card, and the model answered
            history = httpx.get(f"{url}/api/v1/threads/{view.page.locator('[data-testid=thread-id]').text_content()}"
                                "/history", headers=LOCAL_USER).json()["items"]
            assert [m["role"] for m in history] == ["user", "assistant", "tool", "assistant"]
            content = json.loads(history[2]["content"])
            if result is None:
                assert content["error"]["code"] == "declined"
            else:
                assert content["result"] == pytest.approx(result)
                assert json.loads(str(card.locator(".result").text_content()))["result"] == pytest.approx(result)
            assert view.page.locator("[data-testid=messages] .tool").count() == 1
            answer = view.page.locator("[data-testid=messages] .msg.assistant").last
            assert "Here you are." in str(answer.text_content())
