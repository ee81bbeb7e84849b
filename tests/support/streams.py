"""Checks every reliability test makes of a run's stream: one terminal event, nothing open, nothing repeated."""

from __future__ import annotations

from typing import Any

import httpx

from tests.support.sse import SseFrame, parse_sse
from tests.support.tokens import bearer

TERMINAL = ("RUN_FINISHED", "RUN_ERROR")


def body(thread: str, run: str, text: str = "hello", mid: str = "u-1") -> dict[str, Any]:
    return {"threadId": thread, "runId": run, "messages": [{"id": mid, "role": "user", "content": text}]}


def events_of(text: str) -> list[dict[str, Any]]:
    return [f.json() for f in parse_sse(text) if f.data is not None]


def data_frames(text: str) -> list[SseFrame]:
    return [f for f in parse_sse(text) if f.data is not None]


def assert_well_formed_run(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The rules of sse-events.md §2 that faults could break; returns the terminal event.

    RUN_STARTED first, exactly one terminal event and it is last, text messages and tool calls closed, every
    tool call answered by exactly one result, no message id or tool call id opened twice.
    """
    types = [e["type"] for e in events]
    assert types, "the stream carried no event"
    assert types[0] == "RUN_STARTED", types
    assert sum(t in TERMINAL for t in types) == 1, types
    assert types[-1] in TERMINAL, types
    opened_text: list[str] = []
    open_text: str | None = None
    calls: dict[str, dict[str, int]] = {}
    steps = 0
    for event in events:
        kind = event["type"]
        if kind == "STEP_STARTED":
            steps += 1
        elif kind == "TEXT_MESSAGE_START":
            assert open_text is None and event["messageId"] not in opened_text, event
            open_text = event["messageId"]
            opened_text.append(open_text)
        elif kind == "TEXT_MESSAGE_END":
            assert open_text == event["messageId"], event
            open_text = None
        elif kind == "TOOL_CALL_START":
            assert open_text is None and event["toolCallId"] not in calls, event
            calls[event["toolCallId"]] = {"end": 0, "result": 0}
        elif kind == "TOOL_CALL_END":
            calls[event["toolCallId"]]["end"] += 1
        elif kind == "TOOL_CALL_RESULT":
            calls[event["toolCallId"]]["result"] += 1
    assert open_text is None, "a text message was left open"
    assert steps <= 1, "a second step was opened"
    assert types.count("STEP_STARTED") == types.count("STEP_FINISHED"), types
    for call_id, seen in calls.items():
        assert seen == {"end": 1, "result": 1}, (call_id, seen)
    return events[-1]


async def history(client: httpx.AsyncClient, thread: str, **auth: Any) -> list[dict[str, Any]]:
    resp = await client.get(f"/api/v1/threads/{thread}/history", headers=bearer(**auth), params={"limit": 200})
    assert resp.status_code == 200, resp.text
    items: list[dict[str, Any]] = resp.json()["items"]
    return items


def assert_no_duplicates(items: list[dict[str, Any]]) -> None:
    ids = [i["id"] for i in items]
    assert len(ids) == len(set(ids)), ids
    results = [i["toolCallId"] for i in items if i["role"] == "tool"]
    assert len(results) == len(set(results)), results
