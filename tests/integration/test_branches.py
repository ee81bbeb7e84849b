"""Edit, regenerate, switch and retry, from the model's side (a strict scripted model records every request), through
the app on DynamoDB (moto) and Redis: docs/protocols/agent/run-agent-input.md §3.3."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from shared.llm.types import ChatRequest
from shared.runs.deadline import LAMBDA_CONTEXT_HEADER
from tests.support.chat_requests import post_run, run_body, user
from tests.support.scripted_model import ScriptedModel, Turn
from tests.support.sse import parse_sse
from tests.support.tokens import bearer


def seen(request: ChatRequest) -> list[str]:
    """The texts the model was shown (run notes stripped from the newest user message)."""
    texts = []
    for m in request.messages[1:]:
        text = m.content or ""
        if "[/run notes]" in text:
            text = text.split("[/run notes]", 1)[1].strip()
        texts.append(text)
    return texts


async def history(client: Any, thread: str, **query: str) -> dict[str, Any]:
    resp = await client.get(f"/api/v1/threads/{thread}/history", params=query, headers=bearer())
    assert resp.status_code == 200, resp.text
    body: dict[str, Any] = resp.json()
    return body


async def test_a_regenerate_answers_the_question_again_in_place_of_the_old_answer(
    make_services: Any, asgi_client: Any
) -> None:
    # GIVEN a thread of one question and its answer
    model = ScriptedModel(Turn(text=["Paris."]), Turn(text=["It is Paris."]))
    async with asgi_client(make_services(model)) as client:
        await post_run(client, run_body("th-r", "r1", [user("u1", "capital of France?")]))
        # WHEN the client asks for a regenerate with the same messages and a new runId
        status, frames = await post_run(
            client, run_body("th-r", "r2", [user("u1", "capital of France?")], forwardedProps={"regenerate": True})
        )
        page = await history(client, "th-r")
    # THEN the model saw the question and not the old answer
    assert status == 200 and frames[-1].json()["type"] == "RUN_FINISHED"
    assert seen(model.requests[1]) == ["capital of France?"]
    # AND the new answer replaced the old one on the current branch; the old one is its sibling, still reachable
    items = page["items"]
    assert [i["content"] for i in items] == ["capital of France?", "It is Paris."]
    assert items[0]["parentId"] is None and items[1]["parentId"] == "u1"
    old_answer, new_answer = items[1]["siblingIds"]
    assert new_answer == items[1]["id"]
    async with asgi_client(make_services(ScriptedModel())) as client:
        old_branch = await history(client, "th-r", leaf=old_answer)
    assert [i["content"] for i in old_branch["items"]] == ["capital of France?", "Paris."]


async def test_an_edit_branches_off_and_the_model_sees_nothing_of_the_old_branch(
    make_services: Any, asgi_client: Any
) -> None:
    # GIVEN two turns
    model = ScriptedModel(Turn(text=["A1"]), Turn(text=["A2"]), Turn(text=["A2 edited"]), Turn(text=["A3"]))
    async with asgi_client(make_services(model)) as client:
        await post_run(client, run_body("th-e", "r1", [user("u1", "first")]))
        await post_run(client, run_body("th-e", "r2", [user("u1", "first"), user("u2", "second")]))
        first_answer = (await history(client, "th-e"))["items"][1]["id"]
        # WHEN the second question is edited: a new message whose parent is the first answer
        status, _ = await post_run(
            client,
            run_body(
                "th-e",
                "r3",
                [user("u1", "first"), user("u2b", "second, edited")],
                forwardedProps={"parentMessageId": first_answer},
            ),
        )
        # AND the conversation goes on on the new branch
        await post_run(
            client, run_body("th-e", "r4", [user("u1", "first"), user("u2b", "second, edited"), user("u3", "third")])
        )
        page = await history(client, "th-e")
        audit = await client.get("/api/v1/threads/th-e/audit", headers=bearer(scopes=("agent:audit",)))
    # THEN the edit's request held the edited question and nothing of the old branch
    assert status == 200
    assert seen(model.requests[2]) == ["first", "A1", "second, edited"]
    # AND the next turn's window follows the branch
    assert seen(model.requests[3]) == ["first", "A1", "second, edited", "A2 edited", "third"]
    assert [i["content"] for i in page["items"]] == ["first", "A1", "second, edited", "A2 edited", "third", "A3"]
    assert page["items"][2]["siblingIds"] == ["u2", "u2b"]
    # AND the edit is an audit record: who, which ids
    (edited,) = [d for d in audit.json()["decisions"] if d["kind"] == "message_edited"]
    assert edited["details"] == {"message_id": "u2b", "parent_id": first_answer} and edited["run_id"] == "r3"


async def test_a_switch_changes_what_the_model_sees_next(make_services: Any, asgi_client: Any) -> None:
    model = ScriptedModel(Turn(text=["A1"]), Turn(text=["A1 again"]), Turn(text=["A2"]))
    async with asgi_client(make_services(model)) as client:
        await post_run(client, run_body("th-s", "r1", [user("u1", "question")]))
        await post_run(client, run_body("th-s", "r2", [user("u1", "question")], forwardedProps={"regenerate": True}))
        old_answer = (await history(client, "th-s"))["items"][1]["siblingIds"][0]
        # WHEN the user switches back to the first answer
        resp = await client.put("/api/v1/threads/th-s/branch", json={"leafMessageId": old_answer}, headers=bearer())
        assert resp.status_code == 200, resp.text
        assert [i["content"] for i in resp.json()["items"]] == ["question", "A1"]
        await post_run(client, run_body("th-s", "r3", [user("u1", "question"), user("u2", "next")]))
        audit = await client.get("/api/v1/threads/th-s/audit", headers=bearer(scopes=("agent:audit",)))
    # THEN the next run's model saw the branch switched to
    assert seen(model.requests[2]) == ["question", "A1", "next"]
    decisions = {d["kind"]: d for d in audit.json()["decisions"]}
    assert decisions["branch_switched"]["details"]["to_leaf_id"] == old_answer
    assert decisions["answer_regenerated"]["details"] == {"message_id": "u1"}
    assert decisions["answer_regenerated"]["user_id"] == decisions["branch_switched"]["user_id"] == "user-1"


async def test_a_switch_to_an_unknown_or_foreign_message_is_404(make_services: Any, asgi_client: Any) -> None:
    model = ScriptedModel(Turn(text=["A1"]), Turn(text=["B1"]))
    async with asgi_client(make_services(model)) as client:
        await post_run(client, run_body("th-mine", "r1", [user("u1", "mine")]))
        await post_run(client, run_body("th-other", "r2", [user("o1", "theirs")]), **bearer(user="user-2"))
        unknown = await client.put("/api/v1/threads/th-mine/branch", json={"leafMessageId": "nope"}, headers=bearer())
        foreign_message = await client.put(
            "/api/v1/threads/th-mine/branch", json={"leafMessageId": "o1"}, headers=bearer()
        )
        foreign_thread = await client.put(
            "/api/v1/threads/th-other/branch", json={"leafMessageId": "o1"}, headers=bearer()
        )
        foreign_leaf = await client.get("/api/v1/threads/th-mine/history", params={"leaf": "o1"}, headers=bearer())
    assert [r.status_code for r in (unknown, foreign_message, foreign_thread, foreign_leaf)] == [404] * 4


async def test_a_retry_with_a_new_run_id_calls_no_model_and_charges_nothing(
    make_services: Any, asgi_client: Any
) -> None:
    model = ScriptedModel(Turn(text=["A1"]))
    async with asgi_client(make_services(model)) as client:
        await post_run(client, run_body("th-x", "r1", [user("u1", "hello")]))
        usage_before = (await client.get("/api/v1/usage", headers=bearer())).json()
        # WHEN the same messages come again with a new runId (a retry after a lost response)
        status, body = await post_run(client, run_body("th-x", "r2", [user("u1", "hello")]))
        usage_after = (await client.get("/api/v1/usage", headers=bearer())).json()
        page = await history(client, "th-x")
    # THEN no model request was made, nothing was charged, nothing stored; the error names the run
    assert status == 409 and body[0]["error"]["code"] == "run_exists"
    assert body[0]["error"]["details"] == {"runId": "r1"}
    assert len(model.requests) == 1
    assert usage_after == usage_before
    assert [i["content"] for i in page["items"]] == ["hello", "A1"]


async def test_a_same_id_edit_is_a_409_that_says_how_to_edit(make_services: Any, asgi_client: Any) -> None:
    model = ScriptedModel(Turn(text=["A1"]))
    async with asgi_client(make_services(model)) as client:
        await post_run(client, run_body("th-c", "r1", [user("u1", "hello")]))
        status, body = await post_run(client, run_body("th-c", "r2", [user("u1", "hello, edited")]))
    assert status == 409
    error = body[0]["error"]
    assert error["code"] == "message_edit_conflict"
    assert "parentMessageId" in error["message"]
    assert len(model.requests) == 1


async def test_the_same_run_id_still_attaches_after_the_run_ended(make_services: Any, asgi_client: Any) -> None:
    model = ScriptedModel(Turn(text=["A1"]))
    async with asgi_client(make_services(model)) as client:
        body = run_body("th-a", "r1", [user("u1", "hello")])
        await post_run(client, body)
        status, frames = await post_run(client, body)
    assert status == 200 and frames[-1].json()["type"] == "RUN_FINISHED"
    assert len(model.requests) == 1


async def test_a_retry_while_its_run_still_runs_follows_that_run(make_services: Any, asgi_client: Any) -> None:
    # GIVEN a slow answer (three chunks, half a second apart)
    model = ScriptedModel(Turn(text=["slow ", "long ", "answer"], delay_s=0.5))
    answering = asyncio.Event()
    scripted_stream = model.stream

    def stream(request: ChatRequest) -> Any:
        answering.set()
        return scripted_stream(request)

    model.stream = stream  # type: ignore[method-assign]
    async with asgi_client(make_services(model)) as client:
        first = asyncio.create_task(post_run(client, run_body("th-w", "r1", [user("u1", "hello")])))
        await asyncio.wait_for(answering.wait(), 10)  # the run is answering
        # WHEN the same message comes again under a new runId while the run answers it
        status, frames = await post_run(client, run_body("th-w", "r2", [user("u1", "hello")]))
        await first
    # THEN the retry follows the running run: its events, and no second model request
    assert status == 200
    events = [f.json() for f in frames]
    assert events[0]["type"] == "RUN_STARTED" and events[0]["runId"] == "r1"
    assert events[-1]["type"] == "RUN_FINISHED"
    assert len(model.requests) == 1


async def test_erasure_removes_every_branch(make_services: Any, asgi_client: Any, store: Any) -> None:
    model = ScriptedModel(Turn(text=["A1"]), Turn(text=["A1 again"]), Turn(text=["B1"]))
    async with asgi_client(make_services(model)) as client:
        await post_run(client, run_body("th-d", "r1", [user("u1", "question")]))
        await post_run(client, run_body("th-d", "r2", [user("u1", "question")], forwardedProps={"regenerate": True}))
        await post_run(client, run_body("th-d", "r3", [user("u2", "edited")], forwardedProps={"parentMessageId": None}))
        assert len(await store.threads.read_forward("tenant-1", "th-d", after_seq=0, limit=50)) == 5
        deleted = await client.delete("/api/v1/threads/th-d", headers=bearer())
        old_branch = await client.get("/api/v1/threads/th-d/history", params={"leaf": "u1"}, headers=bearer())
    assert deleted.status_code == 204 and old_branch.status_code == 404
    assert await store.threads.read_forward("tenant-1", "th-d", after_seq=0, limit=50) == []


async def test_a_switch_through_a_sibling_lands_on_its_newest_descendant(make_services: Any, asgi_client: Any) -> None:
    model = ScriptedModel(Turn(text=["A1"]), Turn(text=["B1"]))
    async with asgi_client(make_services(model)) as client:
        await post_run(client, run_body("th-t", "r1", [user("u1", "first")]))
        await post_run(client, run_body("th-t", "r2", [user("u1b", "other")], forwardedProps={"parentMessageId": None}))
        # WHEN the user picks the first question with the sibling arrows
        resp = await client.put("/api/v1/threads/th-t/branch", json={"throughMessageId": "u1"}, headers=bearer())
        both = await client.put(
            "/api/v1/threads/th-t/branch", json={"throughMessageId": "u1", "leafMessageId": "u1"}, headers=bearer()
        )
    # THEN the branch goes on to that question's answer
    assert resp.status_code == 200, resp.text
    assert [i["content"] for i in resp.json()["items"]] == ["first", "A1"]
    assert resp.json()["items"][0]["siblingIds"] == ["u1", "u1b"]
    assert both.status_code == 422


async def test_the_messages_snapshot_holds_the_current_branch_only(make_services: Any, asgi_client: Any) -> None:
    model = ScriptedModel(Turn(text=["Paris."]), Turn(text=["It is Paris."]))
    async with asgi_client(make_services(model, stream_deadline_margin_s=1.0)) as client:
        await post_run(client, run_body("th-n", "r1", [user("u1", "capital of France?")]))
        await post_run(
            client, run_body("th-n", "r2", [user("u1", "capital of France?")], forwardedProps={"regenerate": True})
        )
        # WHEN a second device opens the thread with a messages snapshot (an invocation with 2 s left)
        deadline_ms = int((time.time() + 2.0) * 1000)
        following = await client.get(
            "/api/v1/threads/th-n/events",
            params={"snapshot": "messages"},
            headers={**bearer(), LAMBDA_CONTEXT_HEADER: json.dumps({"deadline": deadline_ms})},
        )
    # THEN it shows the question and the regenerated answer, not the old one
    first = next(f.json() for f in parse_sse(following.text) if not f.is_comment_only)
    assert first["type"] == "MESSAGES_SNAPSHOT"
    assert [m.get("content") for m in first["messages"]] == ["capital of France?", "It is Paris."]


async def test_a_regenerate_refuses_a_new_or_unknown_question(make_services: Any, asgi_client: Any) -> None:
    model = ScriptedModel(Turn(text=["A1"]))
    async with asgi_client(make_services(model)) as client:
        await post_run(client, run_body("th-g", "r1", [user("u1", "q")]))
        with_new = await post_run(
            client, run_body("th-g", "r2", [user("u1", "q"), user("u2", "new")], forwardedProps={"regenerate": True})
        )
        unknown_parent = await post_run(
            client, run_body("th-g", "r3", [user("u3", "edit")], forwardedProps={"parentMessageId": "nope"})
        )
        bad_flag = await post_run(client, run_body("th-g", "r4", [user("u1", "q")], forwardedProps={"regenerate": 1}))
        page = await history(client, "th-g")
    for status, body in (with_new, unknown_parent, bad_flag):
        assert status == 422 and body[0]["error"]["code"] == "invalid_request"
    assert unknown_parent[1][0]["error"]["details"][0]["loc"] == ["body", "forwardedProps", "parentMessageId"]
    assert [i["id"] for i in page["items"]] == ["u1", page["items"][1]["id"]]  # nothing stored
    assert len(model.requests) == 1


async def seeded_long_thread(store: Any, thread: str, turns: int) -> list[dict[str, Any]]:
    """A thread of ``turns`` questions and answers (more than admission's newest page of 50), as the client holds
    it: every message, oldest first."""
    from shared.models import Identity, Message, Role

    caller = Identity(tenant_id="tenant-1", user_id="user-1")
    await store.threads.open_thread(caller, thread)
    held: list[dict[str, Any]] = []
    stored: list[Message] = []
    for i in range(turns):
        stored += [
            Message(id=f"{thread}-u{i}", thread_id=thread, role=Role.USER, content=f"question {i}"),
            Message(id=f"{thread}-a{i}", thread_id=thread, role=Role.ASSISTANT, content=f"answer {i}"),
        ]
        held += [
            user(f"{thread}-u{i}", f"question {i}"),
            {"id": f"{thread}-a{i}", "role": "assistant", "content": f"answer {i}"},
        ]
    await store.threads.append_messages(caller, thread, stored)
    return held


async def test_a_same_id_edit_older_than_the_newest_page_is_a_409_too(
    make_services: Any, asgi_client: Any, store: Any
) -> None:
    # GIVEN a thread of 30 turns (60 messages: its first question is older than the 50 admission reads)
    held = await seeded_long_thread(store, "th-old", 30)
    model = ScriptedModel()
    edited = [user("th-old-u0", "question 0, edited"), *held[1:]]
    async with asgi_client(make_services(model)) as client:
        # WHEN the client re-sends the whole conversation with the first question's text changed, and a new one
        status, body = await post_run(client, run_body("th-old", "r1", [*edited, user("th-old-u30", "next")]))
        page = await history(client, "th-old", limit="100")
    # THEN the edit is refused as it is on a short thread, saying how to edit; no model call, nothing stored
    assert status == 409
    assert body[0]["error"]["code"] == "message_edit_conflict"
    assert body[0]["error"]["details"]["messageId"] == "th-old-u0"
    assert model.requests == []
    assert [i["content"] for i in page["items"]][:1] == ["question 0"] and len(page["items"]) == 60


async def test_a_client_that_appends_is_vouched_for_by_the_digest_and_reads_no_older_message(
    make_services: Any, asgi_client: Any, store: Any
) -> None:
    # GIVEN a thread of 30 turns, and a count of the reads of messages older than the newest page
    held = await seeded_long_thread(store, "th-dig", 30)
    reads: list[list[str]] = []
    stored_messages = store.threads.stored_messages

    async def counted(tenant_id: str, thread_id: str, ids: Any) -> Any:
        reads.append(list(ids))
        return await stored_messages(tenant_id, thread_id, ids)

    store.threads.stored_messages = counted
    model = ScriptedModel(Turn(text=["A30"]), Turn(text=["A31"]), Turn(text=["A32"]))
    async with asgi_client(make_services(model)) as client:
        # WHEN the first turn after (the thread kept no digest yet): its older user messages are read and compared
        first = [*held, user("th-dig-u30", "q30")]
        assert (await post_run(client, run_body("th-dig", "r30", first)))[0] == 200
        assert len(reads) == 1 and "th-dig-u0" in reads[0] and all("-u" in i for i in reads[0])
        # WHEN the same client appends its next question THEN the digest vouches for them: nothing more is read
        assert (await post_run(client, run_body("th-dig", "r31", [*first, user("th-dig-u31", "q31")])))[0] == 200
        assert len(reads) == 1
        # WHEN the branch is switched (and back) THEN the digest is dropped, and the next turn reads them once more
        leaf = (await history(client, "th-dig", limit="100"))["items"][-1]["id"]
        for target in ("th-dig-a29", leaf):
            resp = await client.put("/api/v1/threads/th-dig/branch", json={"leafMessageId": target}, headers=bearer())
            assert resp.status_code == 200
        third = [*first, user("th-dig-u31", "q31"), user("th-dig-u32", "q32")]
        assert (await post_run(client, run_body("th-dig", "r32", third)))[0] == 200
    assert len(reads) == 2
    assert [seen(r)[-1] for r in model.requests] == ["q30", "q31", "q32"]
