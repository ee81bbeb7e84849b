"""The /playground page in headless chromium against the served app (uvicorn, redis-server, moto).

Every assertion is on the DOM (or on what the server stored), never on pixels; each test saves a screenshot.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
import pytest

from devtools.local.runner import PLAYGROUND_ROLLOUT
from shared.auth import mint_local_token
from shared.memory.models import Memory, MemoryKind, MemoryStatus
from tests.support.model_server import ModelServer, ScriptedToolCall, ScriptedTurn
from tests.support.redis_server import free_port
from tests.support.settings import TEST_SECRET
from tests.support.tcp_proxy import CuttableProxy

from .pages import BrowserPage, close_all

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

Serve = Callable[..., AbstractContextManager[str]]
OpenPage = Callable[[str], BrowserPage]

CLOCK_RUN = [
    "RUN_STARTED",
    "STATE_SNAPSHOT",
    "STEP_STARTED",
    "TOOL_CALL_START",
    "TOOL_CALL_ARGS",
    "TOOL_CALL_END",
    "TOOL_CALL_RESULT",
    "TEXT_MESSAGE_START",
    "TEXT_MESSAGE_CONTENT",
    "TEXT_MESSAGE_END",
    "STEP_FINISHED",
    "RUN_FINISHED",
]
JS_BUDGET_GZIP_BYTES = 300 * 1024
LOCAL_TOKEN = mint_local_token(TEST_SECRET, user_id="local-user", tenant_id="local-tenant")
LOCAL_USER = {"Authorization": f"Bearer {LOCAL_TOKEN}"}

# Records every length the streamed assistant text had, so a test can tell streaming from a single paint.
RECORD_STREAMING = """() => {
  window.__textLengths = [];
  new MutationObserver(() => {
    const bubbles = document.querySelectorAll('[data-testid=messages] .msg.assistant');
    const last = bubbles[bubbles.length - 1];
    if (last) window.__textLengths.push(last.textContent.length);
  }).observe(document.querySelector('[data-testid=messages]'), {subtree: true, childList: true, characterData: true});
}"""


def send(view: BrowserPage, text: str) -> None:
    """Type into the composer and press Enter (the keyboard path, no click)."""
    box = view.page.locator("#message-input")
    box.fill(text)
    box.press("Enter")


def wait_run_ended(view: BrowserPage, runs: int = 1) -> None:
    """Wait until ``runs`` chat runs in the timeline have a final status and the page has refreshed its panels."""
    view.page.wait_for_function(
        """(n) => [...document.querySelectorAll('[data-testid=runs] .run')]
             .filter((r) => !r.querySelector('strong').textContent.startsWith('memory run'))
             .filter((r) => r.dataset.status).length >= n""",
        arg=runs,
    )
    view.page.wait_for_selector("body[data-running=false]")


def chat_run_event_types(view: BrowserPage) -> list[str]:
    """The event rows of the newest chat run's timeline, in order."""
    return list(
        view.page.evaluate(
            """() => {
                const run = [...document.querySelectorAll('[data-testid=runs] .run')]
                  .find((r) => !r.querySelector('strong').textContent.startsWith('memory run'));
                return [...run.querySelectorAll('.ev')].map((e) => e.dataset.type);
            }"""
        )
    )


def conversation(view: BrowserPage) -> list[dict[str, str]]:
    return list(
        view.page.evaluate(
            """() => [...document.querySelectorAll('[data-testid=messages] > li')].map((li) => ({
                kind: li.classList.contains('tool') ? 'tool' : li.dataset.role,
                text: li.classList.contains('tool') ? '' : li.textContent,
                name: li.dataset.toolName || '',
                args: li.querySelector('.args')?.textContent || '',
                result: li.querySelector('.result')?.textContent || '',
                status: li.querySelector('.status')?.textContent || '',
                classes: li.className,
            }))"""
        )
    )


def current_thread(view: BrowserPage) -> str:
    return str(view.page.locator("[data-testid=thread-id]").text_content())


# ---- the clock tool, streamed, in order -----------------------------------------------------------------------


def test_clock_question_shows_the_tool_call_its_result_and_the_streamed_answer_in_order(
    playground: Serve, open_page: OpenPage
) -> None:
    # GIVEN the page of `make dev` (offline model, streaming word by word), with a token it minted itself
    with playground(chunk_delay_s=0.05) as url:
        view = open_page(f"{url}/playground")
        assert "local-user @ local-tenant" in str(view.page.locator("[data-testid=token-status]").text_content())
        view.page.evaluate(RECORD_STREAMING)
        # WHEN a question about the time is sent with Enter
        send(view, "What time is it in Asia/Shanghai?")
        wait_run_ended(view)
        # AND the memory run that follows it shows up on the thread stream
        view.page.wait_for_selector("[data-testid=runs] .run[data-status] strong:text-matches('^memory run')")
        view.screenshot()
        # THEN the conversation shows the question, the tool call with its arguments and result, then the answer
        items = conversation(view)
        assert [i["kind"] for i in items] == ["user", "tool", "assistant"]
        tool = items[1]
        assert tool["name"] == "get_current_time"
        assert json.loads(tool["args"]) == {"timezone": "Asia/Shanghai"}
        result = json.loads(tool["result"])
        assert result["timezone"] == "Asia/Shanghai" and "iso" in result
        assert items[2]["text"].startswith("[offline model] The current time in Asia/Shanghai is")
        assert result["iso"] in items[2]["text"]
        # AND the answer was painted as it streamed, not at once
        lengths = view.page.evaluate("window.__textLengths")
        assert len({n for n in lengths if 0 < n < len(items[2]["text"])}) >= 3
        # AND the run's timeline holds every event of the run, in stream order
        assert chat_run_event_types(view) == CLOCK_RUN
        # AND its summary shows the outcome, time to first text and the tokens used
        run = view.page.locator("[data-testid=runs] .run").filter(has_not_text="memory run").first
        assert run.get_attribute("data-status") == "finished"
        metrics = str(run.locator("[data-testid=run-metrics]").text_content())
        assert re.search(r"time to first text \d+ ms", metrics) and re.search(r"\d+ tokens", metrics)
        assert "usage: offline-model" in str(run.locator(".ev[data-type=RUN_FINISHED]").text_content())
        # AND the memory run shows its `memory` step
        memory = view.page.locator("[data-testid=runs] .run").filter(has_text="memory run").first
        memory_types = memory.locator(".ev").evaluate_all("(rows) => rows.map((r) => r.dataset.type)")
        assert memory_types == ["RUN_STARTED", "STEP_STARTED", "STEP_FINISHED", "RUN_FINISHED"]
        assert "memory" in str(memory.locator(".ev[data-type=STEP_STARTED]").text_content())
        # AND the history panel (read from the history API after the run) holds the four stored messages
        roles = view.page.locator("[data-testid=history] li").evaluate_all("(li) => li.map((x) => x.dataset.role)")
        assert roles == ["user", "assistant", "tool", "assistant"]


# ---- reload: the conversation comes back from the history API -------------------------------------------------


def test_reload_shows_the_thread_from_history(playground: Serve, open_page: OpenPage) -> None:
    # GIVEN a finished run on a thread
    with playground() as url:
        view = open_page(f"{url}/playground")
        send(view, "What time is it?")
        wait_run_ended(view)
        thread = current_thread(view)
        before = conversation(view)
        # WHEN the page is reloaded
        view.page.reload()
        view.page.wait_for_selector("body[data-ready=true]")
        view.page.wait_for_selector("[data-testid=messages] .tool")
        view.screenshot()
        # THEN the same thread is selected and its conversation is rebuilt from history, identical to the live one
        assert current_thread(view) == thread
        assert (
            view.page.locator("[data-testid=thread-list] button[aria-current=true]").get_attribute("data-thread-id")
            == thread
        )
        after = conversation(view)
        assert [(i["kind"], i["text"], i["name"], i["args"], i["result"]) for i in after] == [
            (i["kind"], i["text"], i["name"], i["args"], i["result"]) for i in before
        ]
        # AND a second message on the reloaded page continues the same thread
        send(view, "What time is it in Europe/Paris?")
        wait_run_ended(view)
        history = httpx.get(f"{url}/api/v1/threads/{thread}/history", headers=LOCAL_USER).json()["items"]
        assert [m["role"] for m in history] == ["user", "assistant", "tool", "assistant"] * 2


# ---- the stream drops mid-run and resumes with Last-Event-ID ---------------------------------------------------


def test_a_dropped_stream_resumes_with_last_event_id_visibly_and_loses_nothing(
    playground: Serve, open_page: OpenPage
) -> None:
    # GIVEN the page reached through a loopback TCP proxy that the test can cut, and a slowly streaming model
    with playground(chunk_delay_s=0.25) as url:
        port = urlparse(url).port or 80
        with CuttableProxy("127.0.0.1", port) as proxy:
            view = open_page(f"http://127.0.0.1:{proxy.port}/playground")
            # The browser logs the refused reconnection attempts; they are the point of this test.
            view.console.expect(r"net::ERR_")
            send(view, "What time is it in Asia/Tokyo?")
            # WHEN the connection is cut while the answer is streaming
            view.page.wait_for_function(
                "() => (document.querySelector('[data-testid=messages] .msg.assistant')?.textContent.length || 0) > 10"
            )
            proxy.cut()
            view.page.wait_for_selector("[data-testid=runs] .ev[data-type=CONNECTION_LOST]")
            view.page.wait_for_timeout(600)
            proxy.restore()
            wait_run_ended(view)
            view.screenshot()
            # THEN the page said that it lost the stream and resumed it with the last event id it had
            banner = str(view.page.locator("[data-testid=connection]").text_content())
            lost = str(view.page.locator(".ev[data-type=CONNECTION_LOST] .detail").first.text_content())
            resumed = str(view.page.locator(".ev[data-type=RESUMED] .detail").first.text_content())
            last_id = re.search(r"Last-Event-ID (\d+-\d+)", lost)
            assert last_id, lost
            assert f"Last-Event-ID {last_id.group(1)}" in resumed and "/events" in resumed
            assert "Resumed run" in banner and last_id.group(1) in banner
            # AND the run's events arrived exactly once each, in order, around the resume markers
            events = [t for t in chat_run_event_types(view) if t not in {"CONNECTION_LOST", "RESUMED"}]
            assert events == CLOCK_RUN
            # AND the answer on the page is exactly the stored one: no gap, no duplicated text
            thread = current_thread(view)
            history = httpx.get(f"{url}/api/v1/threads/{thread}/history", headers=LOCAL_USER).json()["items"]
            shown = [i["text"] for i in conversation(view) if i["kind"] == "assistant"]
            assert shown == [history[-1]["content"]]
            assert view.page.locator("[data-testid=errors]").text_content() == ""


# ---- errors as a person should see them ------------------------------------------------------------------------


def test_a_422_names_the_field_and_the_message_is_not_kept(playground: Serve, open_page: OpenPage) -> None:
    with playground() as url:
        view = open_page(f"{url}/playground")
        view.console.expect(r"status of 422")
        # GIVEN a new thread whose id breaks the identifier rule
        view.page.fill("#new-thread-id", "my thread!")
        view.page.locator("#new-thread-id").press("Enter")
        view.page.wait_for_selector("[data-testid=thread-id]:text('my thread!')")
        # WHEN a message is sent on it
        send(view, "hello")
        view.page.wait_for_selector("[data-testid=error-title]")
        view.screenshot()
        # THEN the error says 422 invalid_request, names the field and what is wrong with it
        assert str(view.page.locator("[data-testid=error-title]").text_content()).startswith(
            "Request refused: 422 invalid_request"
        )
        assert view.page.locator("[data-testid=error-fields] li").all_text_contents() == [
            "body.threadId: invalid identifier"
        ]
        assert "Fix the field" in str(view.page.locator("[data-testid=error-hint]").text_content())
        # AND the refused message is marked as not sent
        assert "unsent" in str(view.page.locator("[data-testid=messages] .msg.user").get_attribute("class"))


def test_a_busy_thread_answers_409_thread_busy_with_what_to_do(playground: Serve, open_page: OpenPage) -> None:
    with playground(chunk_delay_s=0.3) as url:
        # GIVEN another client's run still streaming on the thread
        busy = threading.Event()

        def other_client() -> None:
            body = {
                "threadId": "thread-busy",
                "runId": "run-other",
                "messages": [{"id": "m-other", "role": "user", "content": "What time is it?"}],
            }
            with httpx.stream("POST", f"{url}/api/v1/agent", json=body, headers=LOCAL_USER, timeout=60) as response:
                for line in response.iter_lines():
                    if "STEP_STARTED" in line:
                        busy.set()

        client = threading.Thread(target=other_client, daemon=True)
        client.start()
        assert busy.wait(30)
        view = open_page(f"{url}/playground?thread=thread-busy")
        view.console.expect(r"status of 409")
        # WHEN the page sends on the same thread
        send(view, "And now?")
        view.page.wait_for_selector("[data-testid=error-title]")
        view.screenshot()
        # THEN it shows 409 thread_busy and what to do about it
        assert "409 thread_busy" in str(view.page.locator("[data-testid=error-title]").text_content())
        assert "Wait for it to end" in str(view.page.locator("[data-testid=error-hint]").text_content())
        client.join(60)


def test_a_run_error_is_shown_with_its_code(playground: Serve, open_page: OpenPage) -> None:
    # GIVEN a model endpoint that refuses every connection
    with playground(llm_base_url=f"http://127.0.0.1:{free_port()}/v1", llm_api_key="k", llm_max_retries=0) as url:
        view = open_page(f"{url}/playground")
        # WHEN a message is sent
        send(view, "hello")
        wait_run_ended(view)
        view.screenshot()
        # THEN the page shows RUN_ERROR with its code, and the run is marked failed in the timeline
        title = str(view.page.locator("[data-testid=error-title]").text_content())
        assert title.startswith("Run failed (RUN_ERROR)") and "model_unavailable" in title
        run = view.page.locator("[data-testid=runs] .run").first
        assert run.get_attribute("data-status") == "failed: model_unavailable"
        assert "model_unavailable" in str(run.locator(".ev[data-type=RUN_ERROR]").text_content())


def test_a_refused_tool_call_is_shown_as_refused(playground: Serve, open_page: OpenPage) -> None:
    # GIVEN a model that calls a tool nobody offered, then answers
    with ModelServer() as model:
        model.enqueue(
            ScriptedTurn(tool_calls=[ScriptedToolCall(name="delete_account", arguments='{"user": "bob"}')]),
            ScriptedTurn(text=["I cannot do that."]),
        )
        with playground(llm_base_url=model.base_url, llm_api_key="k") as url:
            view = open_page(f"{url}/playground")
            # WHEN a message is sent
            send(view, "delete bob's account")
            wait_run_ended(view)
            view.screenshot()
            # THEN the tool call is shown, refused as tool_not_allowed, in the conversation and the timeline
            card = view.page.locator("[data-testid=messages] .tool")
            assert "refused" in str(card.get_attribute("class"))
            assert card.locator(".status").text_content() == "refused: tool_not_allowed"
            row = view.page.locator(".ev[data-type=TOOL_CALL_RESULT]")
            assert "refused" in str(row.get_attribute("class"))
            assert str(row.locator(".detail").text_content()).startswith("REFUSED tool_not_allowed")


def test_without_a_valid_token_the_page_says_how_to_get_one(playground: Serve, open_page: OpenPage) -> None:
    with playground() as url:
        # GIVEN a page holding a token the server rejects
        view = open_page(f"{url}/playground")
        view.console.expect(r"status of 401")
        view.page.evaluate("sessionStorage.setItem('playground.token', 'not-a-jwt')")
        # WHEN it loads
        view.page.reload()
        view.page.wait_for_selector("body[data-ready=true]")
        view.page.wait_for_selector("[data-testid=error-title]")
        view.screenshot()
        # THEN it shows the 401 and how to get a token
        assert "401 invalid_token" in str(view.page.locator("[data-testid=error-title]").text_content())
        assert "make token" in str(view.page.locator("[data-testid=error-hint]").text_content())
        # AND pasting a good token makes it work
        view.page.fill("#token-input", LOCAL_TOKEN)
        view.page.locator("#token-input").press("Enter")
        view.page.wait_for_selector("[data-testid=thread-id]:text-matches('^thread-')")
        assert view.page.locator("[data-testid=errors]").text_content() == ""


def test_audit_needs_the_audit_scope_and_then_shows_runs_and_decisions(playground: Serve, open_page: OpenPage) -> None:
    with playground() as url:
        view = open_page(f"{url}/playground")
        view.console.expect(r"status of 403")
        send(view, "What time is it?")
        wait_run_ended(view)
        # WHEN the audit is loaded with the page's ordinary token
        view.page.click("[data-testid=load-audit]")
        view.page.wait_for_selector("[data-testid=audit-error]")
        # THEN it says 403 missing_scope and which token to get
        audit_error = str(view.page.locator("[data-testid=audit-error]").text_content())
        assert "403 missing_scope" in audit_error and "SCOPES=agent:audit make token" in audit_error
        # WHEN the page switches to a token with the audit scope (dev only)
        view.page.click("[data-testid=audit-token]")
        view.page.wait_for_selector("[data-testid=audit-runs]")
        view.screenshot()
        # THEN the audit shows the chat run (worker) and the tool decision
        runs = view.page.locator("[data-testid=audit-runs]").text_content() or ""
        assert "worker / chat_default" in runs and "succeeded" in runs
        decisions = view.page.locator("[data-testid=audit-decisions]").text_content() or ""
        assert "tool_decision" in decisions and "get_current_time" in decisions
        assert "agent:audit" in str(view.page.locator("[data-testid=token-status]").text_content())


# ---- memories with provenance, the thread picker, cancel ------------------------------------------------------


def test_memories_are_listed_with_their_provenance(playground: Serve, open_page: OpenPage) -> None:
    # GIVEN the local user's memories: one active, one superseded by it; and another user's memory
    active = Memory(
        id="mem-tea",
        tenant_id="local-tenant",
        user_id="local-user",
        kind=MemoryKind.PREFERENCE,
        content="Prefers green tea",
        confidence=0.92,
        evidence_quote="I only drink green tea",
        source_message_ids=("msg-u7",),
        run_id="run-42",
        thread_id="thread-drinks",
    )
    old = Memory(
        id="mem-coffee",
        tenant_id="local-tenant",
        user_id="local-user",
        kind=MemoryKind.PREFERENCE,
        content="Likes coffee",
        confidence=0.8,
        evidence_quote="coffee please",
        source_message_ids=("msg-u1",),
        status=MemoryStatus.SUPERSEDED,
        superseded_by="mem-tea",
    )
    other = active.model_copy(update={"id": "mem-other", "user_id": "someone-else", "content": "Not yours"})
    with playground(memories=[active, old, other]) as url:
        # WHEN the page opens
        view = open_page(f"{url}/playground")
        view.page.wait_for_selector("[data-testid=memories] li[data-memory-id]")
        view.screenshot()
        # THEN it lists the user's memories, each with its provenance, and nobody else's
        items = view.page.locator("[data-testid=memories] li[data-memory-id]")
        assert sorted(items.evaluate_all("(li) => li.map((x) => x.dataset.memoryId)")) == ["mem-coffee", "mem-tea"]
        tea = str(view.page.locator("[data-memory-id=mem-tea]").text_content())
        for part in (
            "[preference]",
            "Prefers green tea",
            "active",
            "confidence 0.92",
            "“I only drink green tea”",
            "from msg-u7",
            "run run-42",
            "thread thread-drinks",
        ):
            assert part in tea, part
        assert "superseded" in str(view.page.locator("[data-memory-id=mem-coffee]").text_content())


def test_the_thread_picker_switches_between_threads(playground: Serve, open_page: OpenPage) -> None:
    with playground() as url:
        view = open_page(f"{url}/playground")
        # GIVEN a first thread with a run
        send(view, "What time is it in Asia/Shanghai?")
        wait_run_ended(view)
        first = current_thread(view)
        # WHEN a new thread is started from the picker and used
        view.page.click("[data-testid=new-thread]")
        view.page.wait_for_function(
            "(t) => document.querySelector('[data-testid=thread-id]').textContent !== t", arg=first
        )
        second = current_thread(view)
        assert conversation(view) == []
        send(view, "What time is it in Europe/Paris?")
        wait_run_ended(view)
        # AND the first thread is picked again
        view.page.click(f"[data-testid=thread-list] button[data-thread-id='{first}']")
        view.page.wait_for_selector(f"[data-testid=thread-id]:text('{first}')")
        view.page.wait_for_selector("[data-testid=messages] .msg.assistant")
        view.screenshot()
        # THEN both threads are listed, and the conversation is the first thread's
        listed = view.page.eval_on_selector_all(
            "[data-testid=thread-list] button[data-thread-id]", "(buttons) => buttons.map((b) => b.dataset.threadId)"
        )
        assert set(listed) == {first, second}
        texts = [i["text"] for i in conversation(view) if i["kind"] in {"user", "assistant"}]
        assert texts[0] == "What time is it in Asia/Shanghai?" and "Asia/Shanghai" in texts[1]


def test_cancel_stops_the_run_and_keeps_the_partial_answer(playground: Serve, open_page: OpenPage) -> None:
    with playground(chunk_delay_s=0.3) as url:
        view = open_page(f"{url}/playground")
        # GIVEN a slowly streaming answer
        send(view, "What time is it?")
        view.page.wait_for_selector("[data-testid=messages] .msg.assistant")
        # WHEN the person cancels the run
        view.page.click("[data-testid=cancel-run]")
        wait_run_ended(view)
        view.screenshot()
        # THEN the run ends as cancelled, and the history keeps the partial answer marked partial
        run = view.page.locator("[data-testid=runs] .run").filter(has_not_text="memory run").first
        assert run.get_attribute("data-status") == "cancelled"
        assert "outcome cancelled" in str(run.locator(".ev[data-type=RUN_FINISHED]").text_content())
        assert "(partial)" in str(view.page.locator("[data-testid=history]").text_content())
        assert "partial" in str(view.page.locator("[data-testid=messages] .msg.assistant").get_attribute("class"))


# ---- accessibility and basics -----------------------------------------------------------------------------------


def test_keyboard_focus_is_visible_and_shift_enter_does_not_send(playground: Serve, open_page: OpenPage) -> None:
    with playground() as url:
        view = open_page(f"{url}/playground")
        box = view.page.locator("#message-input")
        # GIVEN the composer; WHEN Shift+Enter is pressed, THEN it adds a line and sends nothing
        box.fill("first line")
        box.press("Shift+Enter")
        assert box.input_value() == "first line\n"
        assert view.page.locator("[data-testid=messages] > li").count() == 0
        # WHEN the keyboard moves focus to the next controls
        box.focus()
        outlines = []
        for _ in range(3):
            view.page.keyboard.press("Tab")
            outlines.append(
                view.page.evaluate(
                    """() => { const s = getComputedStyle(document.activeElement);
                               return [document.activeElement.tagName, s.outlineStyle, s.outlineWidth]; }"""
                )
            )
        view.screenshot()
        # THEN every focused control draws a visible outline
        assert all(style != "none" and width != "0px" for _tag, style, width in outlines), outlines


def test_the_page_loads_nothing_from_another_origin_and_its_js_is_within_budget(
    playground: Serve, open_page: OpenPage, browser: Any
) -> None:
    with playground() as url:
        # GIVEN the page loaded in a fresh context that records every response
        context = browser.new_context()
        page = context.new_page()
        responses: list[Any] = []
        page.on("response", lambda response: responses.append(response))
        errors: list[str] = []
        page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
        page.goto(f"{url}/playground")
        page.wait_for_selector("body[data-ready=true]")
        # WHEN the JavaScript it loaded is measured, gzipped
        scripts = [r for r in responses if r.request.resource_type == "script"]
        js_gzip = sum(len(gzip.compress(r.body(), compresslevel=9)) for r in scripts)
        origins = {urlparse(r.url).netloc for r in responses if not r.url.startswith("data:")}
        csp = next(r for r in responses if urlparse(r.url).path == "/playground").headers["content-security-policy"]
        context.close()
        # THEN it is one bundle within the budget, every request stayed on the app's origin, and the CSP says so
        assert len(scripts) == 1 and 0 < js_gzip <= JS_BUDGET_GZIP_BYTES, js_gzip
        assert origins == {urlparse(url).netloc}
        assert "script-src 'self'" in csp and "connect-src 'self'" in csp
        assert errors == []
        print(f"playground JS: {js_gzip} bytes gzipped (budget {JS_BUDGET_GZIP_BYTES})")


# ---- the front-end tool demo ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("button", "answer", "reply"), [("accept", True, "You confirmed"), ("decline", False, "You declined")]
)
def test_the_front_end_tool_opens_a_confirm_dialog_and_its_answer_is_the_next_run(
    playground: Serve, open_page: OpenPage, button: str, answer: bool, reply: str
) -> None:
    # GIVEN make dev's profile roll-out (the local tenant's chats may call the page's confirm_booking tool)
    with playground(profile_rollout=PLAYGROUND_ROLLOUT) as url:
        view = open_page(f"{url}/playground")
        requests: list[dict[str, Any]] = []
        view.page.on(
            "request",
            lambda r: (
                requests.append(r.post_data_json) if r.method == "POST" and r.url.endswith("/api/v1/agent") else None
            ),
        )
        # WHEN a booking is asked for, and the model calls the front-end tool
        send(view, "Please book a table for two")
        dialog = view.page.locator("[data-testid=confirm-dialog]")
        dialog.wait_for(state="visible")
        # THEN run 1 ended with the call pending, and the page asks the person, showing the call's arguments
        first = view.page.locator("[data-testid=runs] .run").filter(has_not_text="memory run").first
        assert "pending" in str(first.locator(".ev[data-type=RUN_FINISHED]").text_content())
        assert json.loads(str(view.page.locator("[data-testid=confirm-args]").text_content())) == {
            "what": "Please book a table for two"
        }
        view.screenshot("dialog")
        # WHEN the person answers
        view.page.click(f"[data-testid=confirm-{button}]")
        wait_run_ended(view, runs=2)
        view.screenshot()
        # THEN run 1 declared the tool, and run 2 carried the tool result for the call
        assert [t["name"] for t in requests[0]["tools"]] == ["confirm_booking"]
        call_id = view.page.locator("[data-testid=messages] .tool").get_attribute("data-tool-call-id")
        sent = next(m for m in requests[1]["messages"] if m["role"] == "tool")
        assert sent["toolCallId"] == call_id and json.loads(sent["content"]) == {"confirmed": answer}
        # AND the thread holds the call, its answer once and the model's reply, shown on the page too
        thread = current_thread(view)
        history = httpx.get(f"{url}/api/v1/threads/{thread}/history", headers=LOCAL_USER).json()["items"]
        assert [m["role"] for m in history] == ["user", "assistant", "tool", "assistant"]
        assert history[1]["toolCalls"][0]["function"]["name"] == "confirm_booking"
        assert history[2]["toolCallId"] == call_id and json.loads(history[2]["content"]) == {"confirmed": answer}
        assert reply in history[3]["content"]
        assert reply in str(view.page.locator("[data-testid=messages] .msg.assistant").last.text_content())
        assert view.page.locator("[data-testid=errors]").text_content() == ""


# ---- `make dev` itself --------------------------------------------------------------------------------------------


def test_make_dev_serves_the_playground_and_a_tool_call_run_end_to_end(
    open_page: OpenPage, contexts: list[Any]
) -> None:
    # GIVEN the local runner exactly as `make dev` starts it (embedded moto, in-process stream store, offline model)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in {"PLAYGROUND_ENABLED", "JWT_SECRET", "AUTH_MODE"}}
    env.update({"PORT": str(port), "HOST": "127.0.0.1", "LOG_LEVEL": "WARNING"})
    proc = subprocess.Popen(
        [sys.executable, "-m", "devtools.local.runner"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else "local runner exited"
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "make dev did not start"
            time.sleep(0.2)
        # WHEN the page is opened and asked for the time
        view = open_page(f"{base}/playground")
        send(view, "What time is it in Asia/Shanghai?")
        wait_run_ended(view)
        view.screenshot()
        # THEN it minted its own token and shows the run end to end: tool call, result, answer
        assert "local-user @ local-tenant" in str(view.page.locator("[data-testid=token-status]").text_content())
        items = conversation(view)
        assert [i["kind"] for i in items] == ["user", "tool", "assistant"]
        assert items[1]["name"] == "get_current_time" and "iso" in json.loads(items[1]["result"])
        assert "[offline model]" in items[2]["text"]
        assert chat_run_event_types(view) == CLOCK_RUN
    finally:
        close_all(contexts)
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
