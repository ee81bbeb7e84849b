"""The official ``@ag-ui/client`` regenerates and edits through ``forwardedProps`` (run-agent-input.md §3.3),
end to end on loopback: uvicorn serving the app, a real redis-server, moto, the real ``openai`` client against the
scripted model server, and ``ag-ui-validate`` on every stream."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.agui_clients import run_js_agent, turn_problems, validate_sse
from tests.support.live_app import serve_with_model
from tests.support.model_server import (  # noqa: F401  (model_server_fixture: the fixture)
    ModelServer,
    ScriptedTurn,
    model_server_fixture,
)
from tests.support.tokens import bearer

pytestmark = pytest.mark.e2e


@pytest.fixture
def live(store: Any, redis_url: str, model_server: ModelServer) -> Iterator[str]:
    with serve_with_model(store, redis_url, model_server) as url:
        yield url


def said(request: dict[str, Any]) -> list[str]:
    """The conversation texts of a model request (the run notes before the newest user text left out)."""
    texts = []
    for message in request["messages"][1:]:
        text = message.get("content") or ""
        texts.append(text.split("[/run notes]", 1)[-1].strip())
    return texts


def test_the_official_client_regenerates_and_edits_through_forwarded_props(
    live: str, model_server: ModelServer
) -> None:
    model_server.enqueue(
        ScriptedTurn(text=["Paris."]),
        ScriptedTurn(text=["It is Paris."]),
        ScriptedTurn(text=["Rome."]),
    )
    headers = bearer()
    # WHEN a chat UI on the official client asks, regenerates the answer, then edits the question
    report = run_js_agent(
        f"{live}/api/v1/agent",
        headers,
        "thread-branches",
        [
            {"runId": "run-1", "userMessage": {"id": "u-1", "content": "Capital of France?"}},
            {"runId": "run-2", "truncateAfter": "u-1", "forwardedProps": {"regenerate": True}},
            {
                "runId": "run-3",
                "truncateAfter": None,
                "userMessage": {"id": "u-1b", "content": "Capital of Italy?"},
                "forwardedProps": {"parentMessageId": None},
            },
        ],
    )
    first, regenerated, edited = report["turns"]
    # THEN the client saw three clean runs
    for turn in (first, regenerated, edited):
        assert turn_problems(turn) == []
        wire = turn["requests"][0]["response"]
        assert wire is not None and wire["status"] == 200
        assert not validate_sse(wire["body"]).errors
    # AND the regenerate's model request held the question, not the old answer; the edit's only the edited question
    requests = model_server.requests
    assert said(requests[1]) == ["Capital of France?"]
    assert said(requests[2]) == ["Capital of Italy?"]
    # AND the client's own messages follow the branch it is on
    assert [m.get("content") for m in regenerated["messages"]] == ["Capital of France?", "It is Paris."]
    assert [m.get("content") for m in edited["messages"]] == ["Capital of Italy?", "Rome."]
    # AND the history has both questions as siblings, the current branch being the edited one
    history = httpx.get(f"{live}/api/v1/threads/thread-branches/history", headers=headers).json()
    assert [m["content"] for m in history["items"]] == ["Capital of Italy?", "Rome."]
    assert history["items"][0]["siblingIds"] == ["u-1", "u-1b"]
