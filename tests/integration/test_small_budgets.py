"""Small budgets work (issue: a user whose ``tokensPerDay`` is 20,000 was refused on the first message of the day,
because a run reserved its profile's worst case, 28,096 tokens). Through the app on DynamoDB (moto) and Redis, with a
scripted model whose every run uses 5,000 tokens."""

from __future__ import annotations

import json
from typing import Any

from shared.auth import mint_local_token
from shared.limits.gate import ONE_RUN_TOKENS
from shared.settings import Settings
from shared.wiring import ServiceOverrides, Services
from tests.support.scripted_model import ScriptedModel, Turn

SECRET = "test-secret-for-hs256-tokens-0123456789"
BUDGET = 20_000
RUN_TOKENS = 5_000


def headers(user: str, *scopes: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {mint_local_token(SECRET, user_id=user, tenant_id='tenant-a', scopes=scopes)}"}


def services(store: Any, stream: Any, model: ScriptedModel, limits: dict[str, Any]) -> Services:
    settings = Settings(
        table_name="agent-test",
        aws_region="us-east-1",
        jwt_secret=SECRET,
        auth_mode="hs256",
        sse_ping_interval_s=1.0,
        limits=json.dumps(limits),
    )
    return Services(settings, overrides=ServiceOverrides(store=store, stream=stream, model=model))


def five_thousand(_request: Any) -> Turn:
    return Turn(text=["an answer"], input_tokens=RUN_TOKENS - 1_000, output_tokens=1_000)


async def test_a_20000_token_budget_admits_5000_token_runs_until_spent_and_never_more_than_one_beyond(
    store: Any, redis_stream: Any, asgi_client: Any
) -> None:
    # GIVEN a user whose daily budget is 20,000 tokens, below the default profile's worst case (28,096)
    model = ScriptedModel(fallback=five_thousand)
    async with asgi_client(services(store, redis_stream, model, {"user": {"tokensPerDay": BUDGET}})) as client:
        statuses: list[int] = []
        refusal: dict[str, Any] = {}
        # WHEN she sends messages, each run using 5,000 tokens, until one is refused
        for turn in range(1, 8):
            body = {
                "threadId": "th-small",
                "runId": f"r{turn}",
                "messages": [{"id": f"u{i}", "role": "user", "content": f"question {i}"} for i in range(1, turn + 1)],
            }
            resp = await client.post("/api/v1/agent", json=body, headers=headers("alice"))
            statuses.append(resp.status_code)
            if resp.status_code != 200:
                refusal = resp.json()["error"]
                break
        usage = (await client.get("/api/v1/usage", headers=headers("alice"))).json()
    # THEN the first message is answered, then 3 or 4 runs in all, then a refusal
    admitted = statuses.count(200)
    assert statuses == [200] * admitted + [429] and admitted in (3, 4), statuses
    assert len(model.requests) == admitted  # one model call per admitted run, none for the refused one
    # AND the refusal says what the run needed and what remains
    details = refusal["details"]
    assert refusal["code"] == "quota_exceeded" and details["kind"] == "tokensPerDay"
    assert details["remaining"] == BUDGET - admitted * RUN_TOKENS
    assert details["needed"] > details["remaining"]
    assert f"{details['needed']:,}" in refusal["message"] and f"{details['remaining']:,}" in refusal["message"]
    # AND what is counted is what the runs used: never beyond the budget by more than one run
    assert usage["counted"]["tokensToday"] == admitted * RUN_TOKENS <= BUDGET + RUN_TOKENS


async def test_the_admin_limits_api_warns_when_a_budget_is_below_one_typical_run(
    store: Any, redis_stream: Any, asgi_client: Any
) -> None:
    model = ScriptedModel(Turn(text=["hi"]))
    limits = {"tenant": {"tokensPerMonth": 10_000_000}}
    async with asgi_client(services(store, redis_stream, model, limits)) as client:
        body = {"threadId": "th", "runId": "r1", "messages": [{"id": "u1", "role": "user", "content": "hi"}]}
        assert (await client.post("/api/v1/agent", json=body, headers=headers("bob"))).status_code == 200
        path = "/api/v1/admin/users/bob/limits"
        tiny = await client.put(path, json={"tokensPerDay": 5_000}, headers=headers("boss", "agent:admin"))
        fine = await client.put(path, json={"tokensPerDay": 20_000}, headers=headers("boss", "agent:admin"))
    assert tiny.status_code == 200 and fine.status_code == 200
    (warning,) = tiny.json()["warnings"]
    assert (warning["limit"], warning["value"], warning["typicalRun"]) == ("tokensPerDay", 5_000, ONE_RUN_TOKENS)
    assert "warnings" not in fine.json()
