"""Contract of the limits' counters: the same cases against the in-memory counters and DynamoDB (moto).

The DynamoDB side is what production runs: each reservation is one conditional write per scope, so concurrent
reservations can never take more than the limits allow."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import boto3
import pytest

from shared.adapters.aws.usage_counters import DynamoDBUsageCounters
from shared.adapters.in_memory.usage import InMemoryUsageCounters
from shared.limits.config import LimitSet
from shared.limits.models import ReserveRequest, RunSpend, ScopeAsk, TokenCounts
from shared.limits.ports import UsageCounters
from shared.limits.windows import Windows
from tests.support.moto_lock import OneRequestAtATime

TABLE = "agent-test"  # the table the ``aws`` fixture creates
REGION = "us-east-1"
NOW = Windows.at(datetime(2026, 12, 2, 12, 0, tzinfo=UTC))


@pytest.fixture(params=["memory", "dynamodb"])
def counters(request: pytest.FixtureRequest) -> UsageCounters:
    if request.param == "memory":
        return InMemoryUsageCounters()
    request.getfixturevalue("aws")
    # moto in-process is not thread-safe: one request at a time, as the store fixture sends them (the lambda
    # emulation tier runs the same reservations on a moto server, concurrently).
    client = cast(Any, OneRequestAtATime(boto3.client("dynamodb", region_name=REGION)))
    return DynamoDBUsageCounters(TABLE, lambda: client, usage_retention=timedelta(days=400))


def ask(limits: LimitSet, tokens: int = 100, *, slot: bool = True) -> ScopeAsk:
    return ScopeAsk(limits=limits, tokens=tokens, takes_slot=slot, counts_run=slot)


def request(
    run_id: str, user: ScopeAsk, tenant: ScopeAsk | None = None, *, version: int = 0, **kw: Any
) -> ReserveRequest:
    return ReserveRequest(
        tenant_id=kw.get("tenant_id", "t"),
        user_id=kw.get("user_id", "u"),
        run_id=run_id,
        windows=kw.get("windows", NOW),
        user=user,
        user_limits_version=version,
        tenant=tenant,
    )


async def test_slots_are_taken_up_to_the_limit_then_refused_and_freed_at_settlement(counters: UsageCounters) -> None:
    two = LimitSet(concurrent_runs=2)
    assert (await counters.reserve(request("r1", ask(two)))).reserved
    assert (await counters.reserve(request("r2", ask(two)))).reserved
    refused = await counters.reserve(request("r3", ask(two)))
    assert refused.refusal is not None
    assert (refused.refusal.kind, refused.refusal.scope, refused.refusal.used, refused.refusal.limit) == (
        "concurrentRuns",
        "user",
        2,
        2,
    )
    # a retry of a run that holds a slot takes no other
    assert (await counters.reserve(request("r2", ask(two)))).reserved
    spend = RunSpend("worker", {"m": TokenCounts(input=10, cached_input=5, output=3)})
    await counters.settle(request("r1", ask(two)), spend, windows=NOW)
    view = await counters.counters("t", "user", "u", NOW)
    assert view.active_runs == frozenset({"r2"}) and view.known
    assert (await counters.reserve(request("r3", ask(two)))).reserved


async def test_token_budgets_hold_under_concurrent_reservations(counters: UsageCounters) -> None:
    budget = LimitSet(tokens_per_day=1000, tokens_per_month=5000)
    outcomes = await asyncio.gather(*(counters.reserve(request(f"r{i}", ask(budget, 150))) for i in range(16)))
    assert sum(o.reserved for o in outcomes) == 6  # 6 * 150 = 900 <= 1000 < 1050
    refusals = {o.refusal.kind for o in outcomes if o.refusal is not None}
    assert refusals == {"tokensPerDay"}
    view = await counters.counters("t", "user", "u", NOW)
    assert view.day_tokens == 900 and view.month_tokens == 900
    # a reservation larger than the budget itself is refused too
    big = await counters.reserve(request("big", ask(LimitSet(tokens_per_day=10), 11), user_id="v"))
    assert big.refusal is not None and big.refusal.kind == "tokensPerDay"


async def test_settlement_replaces_the_reservation_and_records_usage_by_model_and_executor(
    counters: UsageCounters,
) -> None:
    budget = LimitSet(tokens_per_day=1000)
    assert (await counters.reserve(request("r1", ask(budget, 600)))).reserved
    spend = RunSpend("memory", {"m1": TokenCounts(100, 20, 30), "m2": TokenCounts(1, 0, 1)})
    await counters.settle(request("r1", ask(budget, 600)), spend, windows=NOW)
    view = await counters.counters("t", "user", "u", NOW)
    assert view.day_tokens == 152 and view.month_tokens == 152 and view.runs_this_minute == 1
    for period in ("2026-12-02", "2026-12"):
        record = await counters.usage("t", "u", period)
        assert record.tokens == {"m1": TokenCounts(100, 20, 30), "m2": TokenCounts(1, 0, 1)}
        assert record.runs == {"memory": 1}
    await counters.reserve(request("r2", ask(budget, 10), user_id="w"))
    await counters.settle(
        request("r2", ask(budget, 10), user_id="w"), RunSpend("worker", {"m1": TokenCounts(1, 0, 0)}), windows=NOW
    )
    assert [r.user_id for r in await counters.tenant_usage("t", "2026-12")] == ["u", "w"]
    assert await counters.tenant_usage("other", "2026-12") == []


async def test_a_settlement_on_the_next_day_counts_there_and_takes_the_reservation_from_the_day_before(
    counters: UsageCounters,
) -> None:
    budget = LimitSet(tokens_per_day=1000)
    assert (await counters.reserve(request("r1", ask(budget, 600)))).reserved
    tomorrow = Windows.at(NOW.now + timedelta(days=1))
    await counters.settle(
        request("r1", ask(budget, 600)), RunSpend("worker", {"m": TokenCounts(50, 0, 0)}), windows=tomorrow
    )
    assert (await counters.counters("t", "user", "u", NOW)).day_tokens == 0
    assert (await counters.counters("t", "user", "u", tomorrow)).day_tokens == 50


async def test_release_gives_everything_back_and_release_slot_is_idempotent(counters: UsageCounters) -> None:
    limits = LimitSet(concurrent_runs=1, runs_per_minute=1, tokens_per_day=100)
    assert (await counters.reserve(request("r1", ask(limits, 100)))).reserved
    await counters.release(request("r1", ask(limits, 100)))
    view = await counters.counters("t", "user", "u", NOW)
    assert (view.day_tokens, view.runs_this_minute, view.active_runs) == (0, 0, frozenset())
    assert (await counters.reserve(request("r2", ask(limits, 100)))).reserved
    await counters.release_slot("t", "u", "r2")
    await counters.release_slot("t", "u", "r2")
    assert (await counters.counters("t", "user", "u", NOW)).active_runs == frozenset()


async def test_the_tenant_scope_refuses_and_the_user_scope_gets_its_share_back(counters: UsageCounters) -> None:
    user, tenant = ask(LimitSet(concurrent_runs=5)), ask(LimitSet(concurrent_runs=1))
    assert (await counters.reserve(request("r1", user, tenant, user_id="a"))).reserved
    refused = await counters.reserve(request("r2", user, tenant, user_id="b"))
    assert refused.refusal is not None and refused.refusal.scope == "tenant"
    assert (await counters.counters("t", "user", "b", NOW)).active_runs == frozenset()
    assert (await counters.counters("t", "tenant", None, NOW)).active_runs == frozenset({"r1"})


async def test_a_change_of_the_users_own_limits_makes_a_reservation_built_before_it_stale(
    counters: UsageCounters,
) -> None:
    assert (await counters.user_limits("t", "u")).version == 0
    changed = await counters.set_user_limits("t", "u", LimitSet(concurrent_runs=1))
    assert changed.version == 1 and changed.limits == LimitSet(concurrent_runs=1)
    outcome = await counters.reserve(request("r1", ask(LimitSet())))
    assert outcome.stale == changed and not outcome.reserved
    assert (await counters.reserve(request("r1", ask(LimitSet(concurrent_runs=1)), version=1))).reserved
    removed = await counters.set_user_limits("t", "u", None)
    assert removed.version == 2 and removed.limits is None
    # another tenant's user of the same id is another counter
    assert not (await counters.counters("t2", "user", "u", NOW)).known
