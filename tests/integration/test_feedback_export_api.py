"""The tenant's feedback export through the ASGI app on DynamoDB (moto): ``GET /api/v1/admin/feedback`` as JSON lines
and CSV, with each answer's run, profile and model; only for ``agent:admin`` (403 otherwise), only the caller's
tenant, a page at a time, and without a thread's feedback once the thread or the account is deleted (issue 45)."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from shared.models import answering_model
from tests.support.scripted_model import ScriptedModel, Turn
from tests.support.tokens import bearer

ADMIN = ("agent:admin",)
EXPORT = "/api/v1/admin/feedback"


async def _judged(client: Any, thread_id: str, body: dict[str, Any], *, tenant: str = "tenant-1") -> str:
    """A turn on ``thread_id`` by user-1 of ``tenant``, its answer judged with ``body``; the answer's id."""
    turn = {
        "threadId": thread_id,
        "runId": f"run-{thread_id}",
        "messages": [{"id": f"u-{thread_id}", "role": "user", "content": "hi"}],
    }
    await client.post("/api/v1/agent", json=turn, headers=bearer(tenant=tenant))
    history = (await client.get(f"/api/v1/threads/{thread_id}/history", headers=bearer(tenant=tenant))).json()
    answer = str(next(m["id"] for m in history["items"] if m["role"] == "assistant"))
    url = f"/api/v1/threads/{thread_id}/messages/{answer}/feedback"
    assert (await client.post(url, json=body, headers=bearer(tenant=tenant))).status_code == 200
    return answer


async def test_an_admin_exports_the_tenants_feedback_with_run_profile_and_model_as_jsonl_and_csv(
    make_services: Any, asgi_client: Any
) -> None:
    services = make_services(ScriptedModel(Turn(text=["one"]), Turn(text=["two"]), Turn(text=["three"])))
    comment = 'too long, "vague"\nand =wrong'
    async with asgi_client(services) as client:
        # GIVEN two judged answers of tenant-1 (one comment needing CSV quoting) and one of tenant-2
        first = await _judged(client, "th-1", {"score": 1})
        second = await _judged(client, "th-2", {"score": -1, "comment": comment, "tags": ["facts", "a;b"]})
        await _judged(client, "th-x", {"score": 1}, tenant="tenant-2")
        # WHEN tenant-1's admin exports both formats
        lines = await client.get(EXPORT, headers=bearer(user="boss", scopes=ADMIN))
        table = await client.get(EXPORT, params={"format": "csv"}, headers=bearer(user="boss", scopes=ADMIN))
    run = await services.run_ledger.get_run("tenant-1", "run-th-2")
    model = answering_model(run)
    assert model is not None
    # THEN JSON lines: tenant-1's two, oldest first, with the answer's run, profile and model
    assert lines.status_code == 200 and lines.headers["content-type"].startswith("application/x-ndjson")
    rows = [json.loads(line) for line in lines.text.splitlines()]
    assert [(r["threadId"], r["messageId"], r["score"]) for r in rows] == [("th-1", first, 1), ("th-2", second, -1)]
    assert rows[1] | {"createdAt": "-"} == {
        "threadId": "th-2",
        "messageId": second,
        "userId": "user-1",
        "score": -1,
        "comment": comment,
        "tags": ["facts", "a;b"],
        "createdAt": "-",
        "runId": "run-th-2",
        "executionProfileName": "chat_default",
        "model": model,
    }
    # AND CSV: a header row, the same rows, the comment read back whole (quoted), made inert for a spreadsheet
    assert table.status_code == 200 and table.headers["content-type"].startswith("text/csv")
    header, *records = list(csv.reader(io.StringIO(table.text)))
    assert header == [*rows[1]]
    assert [r[:2] for r in records] == [["th-1", first], ["th-2", second]]
    assert records[1][3:6] == ["-1", comment, '["facts", "a;b"]'] and records[1][9] == model
    assert "Next-Cursor" not in lines.headers


async def test_the_export_is_for_admins_of_the_tenant_only_and_pages_with_a_cursor(
    make_services: Any, asgi_client: Any
) -> None:
    services = make_services(ScriptedModel(*(Turn(text=[f"answer {i}"]) for i in range(3))))
    async with asgi_client(services) as client:
        answers = [await _judged(client, f"th-{i}", {"score": 1}) for i in range(3)]
        # WHEN a user without agent:admin asks (even with a bad range)  THEN 403 before anything else
        plain = await client.get(EXPORT, headers=bearer())
        plain_bad = await client.get(EXPORT, params={"from": "soon"}, headers=bearer(scopes=("agent:audit",)))
        # AND an admin of another tenant sees none of tenant-1's feedback
        other = await client.get(EXPORT, headers=bearer(user="boss", tenant="tenant-2", scopes=ADMIN))
        # AND tenant-1's admin reads two pages of two
        page1 = await client.get(EXPORT, params={"limit": 2}, headers=bearer(user="boss", scopes=ADMIN))
        cursor = page1.headers["Next-Cursor"]
        page2 = await client.get(
            EXPORT, params={"limit": 2, "cursor": cursor}, headers=bearer(user="boss", scopes=ADMIN)
        )
        # AND a bad range or cursor is 422
        bad = [
            await client.get(EXPORT, params=params, headers=bearer(user="boss", scopes=ADMIN))
            for params in ({"from": "soon"}, {"from": "2026-12-03", "to": "2026-12-01"}, {"cursor": "bm9wZQ"})
        ]
    assert plain.status_code == 403 and plain.json()["error"]["code"] == "missing_scope"
    assert plain_bad.status_code == 403
    assert other.status_code == 200 and other.text == ""
    got = [json.loads(line)["messageId"] for page in (page1, page2) for line in page.text.splitlines()]
    assert got == answers and "Next-Cursor" not in page2.headers
    assert [r.status_code for r in bad] == [422, 422, 422]
    assert bad[2].json()["error"]["code"] == "invalid_cursor"


async def test_a_threads_feedback_leaves_the_export_with_the_thread_and_with_the_account(
    make_services: Any, asgi_client: Any
) -> None:
    services = make_services(ScriptedModel(Turn(text=["one"]), Turn(text=["two"])))
    admin = bearer(user="boss", scopes=ADMIN)
    async with asgi_client(services) as client:
        await _judged(client, "th-1", {"score": 1})
        await _judged(client, "th-2", {"score": -1})
        before = await client.get(EXPORT, headers=admin)
        assert (await client.delete("/api/v1/threads/th-1", headers=bearer())).status_code == 204
        after_thread = await client.get(EXPORT, headers=admin)
        assert (await client.delete("/api/v1/me", headers=bearer(scopes=("agent:erase",)))).status_code == 200
        after_account = await client.get(EXPORT, headers=admin)
    assert [json.loads(line)["threadId"] for line in before.text.splitlines()] == ["th-1", "th-2"]
    assert [json.loads(line)["threadId"] for line in after_thread.text.splitlines()] == ["th-2"]
    assert after_account.text == ""
