"""Feedback on an answer through the ASGI app (issue 45): given, shown in the history, replaced, removed; a score
outside ±1 is 422, a question is 422, another user's answer is 404."""

from __future__ import annotations

from typing import Any

from tests.support.scripted_model import ScriptedModel, Turn
from tests.support.tokens import bearer
from tests.support.traces import in_memory_traces

BODY = {"threadId": "th-1", "runId": "run-1", "messages": [{"id": "u-1", "role": "user", "content": "hi"}]}


async def _answer_id(client: Any) -> str:
    history = (await client.get("/api/v1/threads/th-1/history", headers=bearer())).json()["items"]
    return str(next(m["id"] for m in history if m["role"] == "assistant"))


async def test_feedback_is_given_shown_in_the_history_replaced_and_removed(
    make_services: Any, asgi_client: Any
) -> None:
    services = make_services(ScriptedModel(Turn(text=["hello back"])))
    async with asgi_client(services) as client:
        await client.post("/api/v1/agent", json=BODY, headers=bearer())
        answer = await _answer_id(client)
        url = f"/api/v1/threads/th-1/messages/{answer}/feedback"
        given = await client.post(url, json={"score": 1, "comment": "good", "tags": ["clear"]}, headers=bearer())
        first = (await client.get("/api/v1/threads/th-1/history", headers=bearer())).json()["items"]
        replaced = await client.post(url, json={"score": -1}, headers=bearer())
        second = (await client.get("/api/v1/threads/th-1/history", headers=bearer())).json()["items"]
        removed = await client.delete(url, headers=bearer())
        third = (await client.get("/api/v1/threads/th-1/history", headers=bearer())).json()["items"]
    assert given.status_code == 200 and given.json()["feedback"]["score"] == 1
    shown = next(m for m in first if m["id"] == answer)["feedback"]
    assert shown["score"] == 1 and shown["comment"] == "good" and shown["tags"] == ["clear"]
    assert replaced.status_code == 200
    assert next(m for m in second if m["id"] == answer)["feedback"] == {
        "score": -1,
        "createdAt": replaced.json()["feedback"]["createdAt"],
    }
    assert removed.status_code == 204
    assert "feedback" not in next(m for m in third if m["id"] == answer)
    assert all("feedback" not in m for m in first if m["id"] != answer)


async def test_bad_feedback_is_422_and_another_users_answer_is_404(make_services: Any, asgi_client: Any) -> None:
    services = make_services(ScriptedModel(Turn(text=["hello back"])))
    async with asgi_client(services) as client:
        await client.post("/api/v1/agent", json=BODY, headers=bearer())
        answer = await _answer_id(client)
        url = f"/api/v1/threads/th-1/messages/{answer}/feedback"
        scores = [await client.post(url, json={"score": s}, headers=bearer()) for s in (0, 2, -2, "1", None)]
        question = await client.post("/api/v1/threads/th-1/messages/u-1/feedback", json={"score": 1}, headers=bearer())
        extra = await client.post(url, json={"score": 1, "user": "someone"}, headers=bearer())
        stranger = await client.post(url, json={"score": 1}, headers=bearer(user="user-2"))
        unknown = await client.post(
            "/api/v1/threads/th-1/messages/m-none/feedback", json={"score": 1}, headers=bearer()
        )
        history = (await client.get("/api/v1/threads/th-1/history", headers=bearer())).json()["items"]
    assert [r.status_code for r in scores] == [422] * 5
    assert question.status_code == 422 and question.json()["error"]["code"] == "not_an_answer"
    assert extra.status_code == 422
    assert stranger.status_code == 404 and unknown.status_code == 404
    assert all("feedback" not in m for m in history)


async def test_feedback_is_an_event_on_the_trace_naming_the_run_when_tracing_is_on(
    make_services: Any, asgi_client: Any
) -> None:
    services = make_services(ScriptedModel(Turn(text=["hello back"])))
    async with asgi_client(services) as client:
        await client.post("/api/v1/agent", json=BODY, headers=bearer())
        answer = await _answer_id(client)
        with in_memory_traces() as exported:
            url = f"/api/v1/threads/th-1/messages/{answer}/feedback"
            await client.post(url, json={"score": -1, "comment": "private words"}, headers=bearer())
            spans = list(exported.get_finished_spans())
    (traced,) = [s for s in spans if s.name == "thread.feedback"]
    (event,) = traced.events
    assert event.name == "feedback" and event.attributes is not None
    assert event.attributes["run.id"] == "run-1" and event.attributes["feedback.score"] == -1
    assert "private words" not in str([s.attributes for s in spans]) + str(event.attributes)
