"""A chat run as a client posts it and reads it back: the run body, a user message, and the posted run's status and
SSE events."""

from __future__ import annotations

from typing import Any

import httpx

from tests.support.sse import parse_sse
from tests.support.tokens import bearer

TIME_CALL = ("call_1", "get_current_time", '{"timezone": "Europe/Paris"}')


def run_body(thread: str, run: str, messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"threadId": thread, "runId": run, "messages": messages, "tools": [], "context": [], **extra}


def user(mid: str, text: str) -> dict[str, Any]:
    return {"id": mid, "role": "user", "content": text}


async def post_run(client: httpx.AsyncClient, body: dict[str, Any], **headers: str) -> tuple[int, list[Any]]:
    resp = await client.post("/api/v1/agent", json=body, headers={**bearer(), **headers})
    if resp.headers.get("content-type", "").startswith("text/event-stream"):
        return resp.status_code, [f for f in parse_sse(resp.text) if not f.is_comment_only]
    return resp.status_code, [resp.json()]
