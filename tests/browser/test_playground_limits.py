"""The playground with ``LIMITS`` on: the Usage panel shows the caller's tokens, runs and what remains, and a run
refused over a limit shows the 429, what it means and when to try again."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pytest

pytestmark = pytest.mark.browser


def send(view: Any, text: str) -> None:
    box = view.page.locator("#message-input")
    box.fill(text)
    box.press("Enter")


def test_usage_is_shown_and_a_429_says_which_limit_and_when(playground: Any, open_page: Any) -> None:
    if datetime.now(UTC).second > 45:  # both runs must fall in the same minute
        time.sleep(61 - datetime.now(UTC).second)
    with playground(limits='{"user": {"runsPerMinute": 1, "tokensPerDay": 1000000}}') as url:
        view = open_page(f"{url}/playground")
        view.console.expect(r"status of 429")
        # GIVEN one run of the minute, answered
        send(view, "What time is it in Asia/Shanghai?")
        view.page.wait_for_selector("[data-testid=runs] .run[data-status=finished]")
        view.page.wait_for_selector("body[data-running=false]")
        # THEN the Usage panel counts it and shows the limits with what remains
        view.page.wait_for_selector("[data-testid=usage-day]:text-matches('1 runs')")
        limits = str(view.page.locator("[data-testid=usage-limits]").text_content())
        assert "runsPerMinute 0 left of 1" in limits and "tokensPerDay" in limits
        # WHEN a second run is sent in the same minute
        send(view, "And in Europe/Paris?")
        view.page.wait_for_selector("[data-testid=error-title]")
        view.screenshot("429")
        # THEN the page shows the 429, the limit, and that nothing was started
        title = str(view.page.locator("[data-testid=error-title]").text_content())
        assert title.startswith("Request refused: 429 quota_exceeded")
        hint = str(view.page.locator("[data-testid=error-hint]").text_content())
        assert "runsPerMinute limit is reached (1 of 1)" in hint and "Nothing was started" in hint
        assert "resets at" in hint
        assert "null" not in str(view.page.locator("[data-testid=errors]").text_content())
        assert "unsent" in str(view.page.locator("[data-testid=messages] .msg.user").last.get_attribute("class"))
