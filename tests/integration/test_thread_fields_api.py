"""``GET /api/v1/threads``, ``GET /api/v1/threads/{id}`` and ``PATCH /api/v1/threads/{id}`` through the ASGI app
(issue 45): the thread's title, metadata, flags, last-message preview and count after a real run, the change and
its bounds (422), and the audit record of a change."""

from __future__ import annotations

from typing import Any

from shared.thread_fields import METADATA_KEYS, METADATA_VALUE_CHARS
from tests.support.scripted_model import ScriptedModel, Turn
from tests.support.tokens import bearer


def body(thread: str = "th-1", run: str = "run-1", text: str = "plan a trip to Lisbon") -> dict[str, Any]:
    return {"threadId": thread, "runId": run, "messages": [{"id": f"u-{run}", "role": "user", "content": text}]}


async def test_a_run_gives_the_thread_a_preview_and_a_count_in_the_list_and_the_thread(
    make_services: Any, asgi_client: Any
) -> None:
    # GIVEN a thread with one exchange
    services = make_services(ScriptedModel(Turn(text=["Lisbon in May is lovely."])))
    async with asgi_client(services) as client:
        assert (await client.post("/api/v1/agent", json=body(), headers=bearer())).status_code == 200
        # WHEN the list and the thread are read
        listing = (await client.get("/api/v1/threads", headers=bearer())).json()["items"]
        one = (await client.get("/api/v1/threads/th-1", headers=bearer())).json()
    # THEN both show the answer as the last message, the count and the defaults
    for view in (listing[0], one):
        assert view["threadId"] == "th-1"
        assert view["lastMessage"]["role"] == "assistant"
        assert view["lastMessage"]["preview"] == "Lisbon in May is lovely."
        assert "createdAt" in view["lastMessage"]
        assert view["messageCount"] == 2
        assert view["metadata"] == {} and view["archived"] is False and view["pinned"] is False
        assert "title" not in view  # unset optional fields are omitted


async def test_patch_changes_the_thread_returns_it_and_is_audited(make_services: Any, asgi_client: Any) -> None:
    services = make_services(ScriptedModel(Turn(text=["ok"])))
    async with asgi_client(services) as client:
        await client.post("/api/v1/agent", json=body(), headers=bearer())
        # WHEN the owner renames, tags and pins the thread, then removes a tag
        first = await client.patch(
            "/api/v1/threads/th-1", json={"title": "Lisbon", "metadata": {"a": "1", "b": 2}}, headers=bearer()
        )
        second = await client.patch(
            "/api/v1/threads/th-1", json={"metadata": {"a": None}, "pinned": True}, headers=bearer()
        )
        read = (await client.get("/api/v1/threads/th-1", headers=bearer())).json()
        audit = await client.get(
            "/api/v1/threads/th-1/audit", headers={**bearer(scopes=("agent:audit",)), "x-scopes": "agent:audit"}
        )
    # THEN each answer is 200 with the thread as changed, and a read agrees
    assert first.status_code == 200 and first.json()["title"] == "Lisbon"
    assert second.status_code == 200
    for view in (second.json(), read):
        assert view["title"] == "Lisbon" and view["metadata"] == {"b": 2} and view["pinned"] is True
        assert view["titleSource"] == "client"
        assert view["lastMessage"]["preview"] == "ok"
    # AND the change is in the thread's audit trail, by field name (not the title itself)
    decisions = [d for d in audit.json()["decisions"] if d["kind"] == "thread_updated"]
    assert [d["details"]["fields"] for d in decisions] == [["title", "metadata"], ["metadata", "pinned"]]
    assert "Lisbon" not in str(decisions)


async def test_bad_fields_and_sizes_are_422_and_change_nothing(make_services: Any, asgi_client: Any) -> None:
    services = make_services(ScriptedModel(Turn(text=["ok"])))
    bad = [
        {"metadata": {f"k{i}": "v" for i in range(METADATA_KEYS + 1)}},
        {"metadata": {"k": "x" * (METADATA_VALUE_CHARS + 1)}},
        {"metadata": {"k" * 65: "v"}},
        {"metadata": {"k": {"nested": 1}}},
        {"metadata": "not an object"},
        {"metadata": {"big": 10**40}},
        {"metadata": {"big": 1e300}},
        {"title": "t" * 201},
        {"title": 5},
        {"archived": "yes"},
        {"owner": "user-2"},
    ]
    async with asgi_client(services) as client:
        await client.post("/api/v1/agent", json=body(), headers=bearer())
        for patch in bad:
            resp = await client.patch("/api/v1/threads/th-1", json=patch, headers=bearer())
            assert resp.status_code == 422, (patch, resp.text)
        read = (await client.get("/api/v1/threads/th-1", headers=bearer())).json()
        missing = await client.patch("/api/v1/threads/th-none", json={"title": "x"}, headers=bearer())
    assert read["metadata"] == {} and "title" not in read and read["archived"] is False
    assert missing.status_code == 404


async def test_the_list_hides_archived_threads_puts_pinned_first_and_search_finds_them(
    make_services: Any, asgi_client: Any
) -> None:
    services = make_services(ScriptedModel(Turn(text=["Lisbon"]), Turn(text=["Pasta"]), Turn(text=["Budget"])))
    async with asgi_client(services) as client:
        for i, text in enumerate(["trip", "food", "money"]):
            await client.post("/api/v1/agent", json=body(f"th-{i}", f"run-{i}", text), headers=bearer())
        await client.patch("/api/v1/threads/th-0", json={"pinned": True}, headers=bearer())
        await client.patch("/api/v1/threads/th-1", json={"archived": True, "metadata": {"k": "v"}}, headers=bearer())
        listing = (await client.get("/api/v1/threads", headers=bearer())).json()["items"]
        archived = await client.post("/api/v1/threads/search", json={"archived": True}, headers=bearer())
        by_text = await client.post("/api/v1/threads/search", json={"query": "pasta"}, headers=bearer())
        by_meta = await client.post("/api/v1/threads/search", json={"metadata": {"k": "v"}}, headers=bearer())
        stranger = await client.post("/api/v1/threads/search", json={"query": "pasta"}, headers=bearer(user="user-2"))
        bad = [
            await client.post("/api/v1/threads/search", json=b, headers=bearer())
            for b in (
                {"limit": 0},
                {"metadata": {"k": {"x": 1}}},
                {"cursor": "nope"},
                {"other": 1},
                {"metadata": {"n": 1e300}},
            )
        ]
    assert [t["threadId"] for t in listing] == ["th-0", "th-2"]
    assert [t["threadId"] for t in archived.json()["items"]] == ["th-1"]
    assert [t["threadId"] for t in by_text.json()["items"]] == ["th-1"]
    assert [t["threadId"] for t in by_meta.json()["items"]] == ["th-1"]
    assert stranger.status_code == 200 and stranger.json()["items"] == []
    assert [r.status_code for r in bad] == [422, 422, 422, 422, 422]
