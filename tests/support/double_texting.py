"""Double texting on a live app (issue 28): a first answer followed in the background while more messages arrive
on the same thread, by ``httpx`` or by the official ``@ag-ui/client``."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from tests.support.agui_clients import JsAgentReport, Turn, TurnReport, run_js_agent_async, turn_problems, validate_sse
from tests.support.model_server import ScriptedTurn
from tests.support.sse import parse_sse
from tests.support.streams import events_of
from tests.support.tokens import bearer


def run_body(thread: str, run: str, text: str, strategy: str | None = None) -> dict[str, Any]:
    """A POST /agent body with one user message; ``strategy`` goes in ``forwardedProps.multitaskStrategy``."""
    message = {"id": f"m-{run}", "role": "user", "content": text}
    body: dict[str, Any] = {"threadId": thread, "runId": run, "messages": [message]}
    if strategy is not None:
        body["forwardedProps"] = {"multitaskStrategy": strategy}
    return body


def long_answer(words: int) -> ScriptedTurn:
    """An answer of ``words`` words, one every 0.1 s: long enough to send more messages while it streams."""
    return ScriptedTurn(text=[f"w{i} " for i in range(words)], chunk_delay_s=0.1)


class Following:
    """A POST read in the background: its status, raw body, events and stream ids; ``streaming`` once the answer
    flows, ``pinged`` once a keep-alive came (the run waits its turn)."""

    def __init__(self) -> None:
        self.raw = ""
        self.status: int | None = None
        self.streaming = asyncio.Event()
        self.pinged = asyncio.Event()

    async def post(self, client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> None:
        async with client.stream("POST", f"{url}/api/v1/agent", json=body, headers=bearer()) as resp:
            self.status = resp.status_code
            async for chunk in resp.aiter_text():
                self.raw += chunk
                if ": ping" in self.raw:
                    self.pinged.set()
                if self.raw.count('"TEXT_MESSAGE_CONTENT"') >= 3:
                    self.streaming.set()

    @property
    def events(self) -> list[dict[str, Any]]:
        return events_of(self.raw)

    @property
    def ids(self) -> list[str]:
        """The stream ids of the frames that carry events, in order."""
        return [f.id or "" for f in parse_sse(self.raw) if f.data is not None]


async def first_answer_streaming(
    client: httpx.AsyncClient, url: str, thread: str, run: str, text: str = "hello"
) -> tuple[Following, asyncio.Task[None]]:
    """A first message posted on ``thread`` with no strategy, followed in the background; returns once its answer
    streams, with the task that ends when its stream does."""
    first = Following()
    following = asyncio.create_task(first.post(client, url, run_body(thread, run, text)))
    await asyncio.wait_for(first.streaming.wait(), 10)
    return first, following


async def js_client_sends(url: str, thread: str, text: str, strategy: str) -> JsAgentReport:
    """@ag-ui/client sends one message (run ``run-js-2``) on ``thread`` with ``strategy``; the client's report."""
    turn: Turn = {
        "runId": "run-js-2",
        "userMessage": {"id": "u-2", "content": text},
        "forwardedProps": {"multitaskStrategy": strategy},
    }
    return await run_js_agent_async(f"{url}/api/v1/agent", bearer(), thread, [turn])


def clean_second_run(turn: TurnReport) -> str:
    """The body of the client's run, checked: no problem seen by the client, 200, and ``ag-ui-validate`` clean."""
    assert turn_problems(turn) == []
    wire = turn["requests"][0]["response"]
    assert wire is not None and wire["status"] == 200
    assert validate_sse(wire["body"]).clean
    return wire["body"]
