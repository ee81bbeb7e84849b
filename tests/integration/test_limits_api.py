"""The limits and usage endpoints through the app (in-process, on moto and a real redis-server), from a caller's
and an attacker's side: an administrator of tenant A cannot read or set tenant B's user limits (the same 404 as a
missing user), a caller without ``agent:admin`` is refused (403), a per-user limit above the tenant's own is 422,
and a 429 carries the error shape of errors.md with a ``Retry-After`` header."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from shared.auth import mint_local_token
from shared.settings import Settings
from shared.wiring import ServiceOverrides, Services
from tests.support.scripted_model import ScriptedModel, Turn

SECRET = "test-secret-for-hs256-tokens-0123456789"  # what the shared fixtures sign with
LIMITS = {"user": {"concurrentRuns": 3}, "tenant": {"concurrentRuns": 10, "tokensPerMonth": 10_000_000}}


def headers(user: str, tenant: str, *scopes: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {mint_local_token(SECRET, user_id=user, tenant_id=tenant, scopes=scopes)}"}


ADMIN_A = headers("boss-a", "tenant-a", "agent:admin")
USER_A = headers("alice", "tenant-a")
USER_B = headers("victim", "tenant-b")


def services(store: Any, stream: Any, model: ScriptedModel) -> Services:
    settings = Settings(
        table_name="agent-test",
        aws_region="us-east-1",
        jwt_secret=SECRET,
        auth_mode="hs256",
        sse_ping_interval_s=1.0,
        limits=json.dumps(LIMITS),
    )
    return Services(settings, overrides=ServiceOverrides(store=store, stream=stream, model=model))


def run_body(thread: str, run: str) -> dict[str, Any]:
    return {"threadId": thread, "runId": run, "messages": [{"id": f"m-{run}", "role": "user", "content": "hi"}]}


async def test_an_admin_sets_limits_in_their_tenant_only(store: Any, redis_stream: Any, asgi_client: Any) -> None:
    model = ScriptedModel(Turn(text=["a"], input_tokens=100, output_tokens=7), Turn(text=["b"]))
    async with asgi_client(services(store, redis_stream, model)) as client:
        # GIVEN a user in each tenant who has run once
        assert (await client.post("/api/v1/agent", json=run_body("th-a", "r-a"), headers=USER_A)).status_code == 200
        assert (await client.post("/api/v1/agent", json=run_body("th-b", "r-b"), headers=USER_B)).status_code == 200
        # WHEN tenant A's admin reads, sets or deletes tenant B's user: the same 404 as a user that does not exist
        for user in ("victim", "nobody"):
            path = f"/api/v1/admin/users/{user}/limits"
            got = await client.get(path, headers=ADMIN_A)
            put = await client.put(path, json={"concurrentRuns": 1}, headers=ADMIN_A)
            deleted = await client.delete(path, headers=ADMIN_A)
            assert [got.status_code, put.status_code, deleted.status_code] == [404, 404, 404]
            assert got.json() == {"error": {"code": "not_found", "message": "user not found"}}
        # AND a user without agent:admin is refused, even on their own limits
        for method, path in (
            ("GET", "/api/v1/admin/users/alice/limits"),
            ("PUT", "/api/v1/admin/users/alice/limits"),
            ("GET", "/api/v1/admin/usage"),
        ):
            refused = await client.request(method, path, json={"concurrentRuns": 99}, headers=USER_A)
            assert refused.status_code == 403 and refused.json()["error"]["code"] == "missing_scope"
        # AND a per-user limit above the tenant's own is 422
        above = await client.put("/api/v1/admin/users/alice/limits", json={"concurrentRuns": 11}, headers=ADMIN_A)
        assert above.status_code == 422 and above.json()["error"]["code"] == "limit_above_tenant"
        assert above.json()["error"]["details"] == [{"limit": "concurrentRuns", "requested": 11, "tenantLimit": 10}]
        # WHEN the admin sets alice's own limits within the tenant's
        ok = await client.put("/api/v1/admin/users/alice/limits", json={"tokensPerDay": 50}, headers=ADMIN_A)
        assert ok.status_code == 200
        assert ok.json()["effective"] == {"concurrentRuns": 3, "tokensPerDay": 50}
        # THEN her next run is refused at once: 429 quota_exceeded with a Retry-After, nothing stored
        refused = await client.post("/api/v1/agent", json=run_body("th-a2", "r-a2"), headers=USER_A)
        assert refused.status_code == 429
        error = refused.json()["error"]
        assert error["code"] == "quota_exceeded" and error["details"]["kind"] == "tokensPerDay"
        assert error["details"]["scope"] == "user" and error["details"]["limit"] == 50
        assert int(refused.headers["Retry-After"]) >= 1
        assert await store.runs.get_run("tenant-a", "r-a2") is None
        # AND tenant B's user was never touched
        b_usage = (await client.get("/api/v1/usage", headers=USER_B)).json()
        assert b_usage["limits"]["user"] == {"concurrentRuns": 3}
        # WHEN the admin removes alice's own limits, the deployment's apply again
        assert (await client.delete("/api/v1/admin/users/alice/limits", headers=ADMIN_A)).status_code == 204
        mine = (await client.get("/api/v1/admin/users/alice/limits", headers=ADMIN_A)).json()
        assert mine["limits"] is None and mine["effective"] == {"concurrentRuns": 3}


async def test_usage_for_the_caller_and_per_user_for_the_admin(store: Any, redis_stream: Any, asgi_client: Any) -> None:
    model = ScriptedModel(Turn(text=["a"], input_tokens=1_000, output_tokens=10))
    async with asgi_client(services(store, redis_stream, model)) as client:
        assert (await client.post("/api/v1/agent", json=run_body("th-a", "r-a"), headers=USER_A)).status_code == 200
        usage = (await client.get("/api/v1/usage", headers=USER_A)).json()
        assert usage["day"]["tokens"] == {"qwen3.5-30b-a3b": {"input": 1000, "cachedInput": 0, "output": 10}}
        assert usage["month"]["runs"] == {"worker": 1} and usage["month"]["estimatedCostUsd"] > 0
        assert usage["counted"] == {"tokensToday": 1010, "tokensThisMonth": 1010, "activeRuns": 0, "runsThisMinute": 1}
        assert usage["remaining"]["tenant"]["tokensPerMonth"] == 10_000_000 - 1010
        month = usage["day"]["period"][:7]
        lines = (await client.get(f"/api/v1/admin/usage?month={month}", headers=ADMIN_A)).text.splitlines()
        assert [json.loads(line)["userId"] for line in lines] == ["alice"]
        as_csv = await client.get(f"/api/v1/admin/usage?month={month}&format=csv", headers=ADMIN_A)
        assert as_csv.headers["content-type"].startswith("text/csv")
        rows = list(csv.DictReader(io.StringIO(as_csv.text)))
        assert [(r["userId"], r["model"], r["inputTokens"], r["outputTokens"]) for r in rows] == [
            ("alice", "qwen3.5-30b-a3b", "1000", "10")
        ]
        bad = await client.get("/api/v1/admin/usage?month=2026-13", headers=ADMIN_A)
        assert bad.status_code == 422
