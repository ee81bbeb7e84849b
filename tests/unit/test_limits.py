"""Limits on the fakes: ``LIMITS`` validated, reservations refused with nothing stored, settled with what the run
used, a slot freed by its run's end, a user's own limits applied at the next reservation, and a tenant
administrator kept under the tenant's own limits. The same counters against DynamoDB: tests/contract; the same
rules through the app as Lambda starts it, under 64 concurrent requests: tests/lambda_emulation/test_limits.py."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.adapters.in_memory.store import InMemoryStore
from shared.adapters.in_memory.stream import InMemoryEventStream
from shared.adapters.in_memory.usage import InMemoryUsageCounters
from shared.errors import ConfigurationError, Conflict, InvalidRequest, NotFound, TooManyRequests
from shared.executors.context import RunContext
from shared.executors.worker import WorkerExecutor
from shared.limits.config import parse_limits
from shared.limits.gate import LimitGate, estimate_tokens
from shared.limits.usage import UsageReports, parse_prices
from shared.limits.windows import Windows
from shared.models import ExecutionMeta, Identity, Message, Origin, Role, Run, RunStatus, utc_now
from shared.profiles import default_catalog
from shared.runs.service import RunService
from shared.runs.sweeper import RunSweeper
from shared.tools.registry import ToolRegistry
from tests.support.scripted_model import ScriptedModel, Turn

USER = Identity(tenant_id="t1", user_id="u1")
ADMIN = Identity(tenant_id="t1", user_id="boss", scopes=frozenset({"agent:admin"}))
PROFILE = default_catalog().get("chat_default")
ESTIMATE = estimate_tokens(PROFILE)


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


class Rig:
    """A run service on the fakes with a limit gate."""

    def __init__(self, limits: dict[str, Any], *turns: Turn, clock: Clock | None = None) -> None:
        import json

        self.store = InMemoryStore()
        self.stream = InMemoryEventStream()
        self.counters = InMemoryUsageCounters()
        self.clock = clock or Clock(datetime(2026, 12, 2, 12, 0, tzinfo=UTC))
        self.gate = LimitGate(self.counters, parse_limits(json.dumps(limits)), clock=self.clock)
        self.model = ScriptedModel(*turns)
        self.worker = WorkerExecutor(self.model, self.store.threads, self.store.audit, ToolRegistry())
        self.runs = RunService(self.store.threads, self.store.runs, self.store.audit, self.stream, limits=self.gate)

    def ctx(self, run_id: str, thread_id: str, user: Identity = USER) -> RunContext:
        return RunContext(
            identity=user,
            thread_id=thread_id,
            run_id=run_id,
            profile=PROFILE,
            meta=ExecutionMeta(origin=Origin.CHAT),
            latest_user_text="hi",
        )

    def gate_windows(self) -> Windows:
        return Windows.at(self.clock())

    async def admit(self, run_id: str, thread_id: str, user: Identity = USER) -> Any:
        message = Message(id=f"m-{run_id}", thread_id=thread_id, role=Role.USER, content="hi")
        return await self.runs.admit(
            self.ctx(run_id, thread_id, user), body_digest=run_id, new_messages=[message], executor=self.worker
        )


@pytest.mark.parametrize(
    "raw",
    [
        "{not json",
        "[1, 2]",
        '{"user": {"concurrentRuns": 0}}',
        '{"user": {"tokensPerWeek": 5}}',
        '{"tenants": {"t-big": {"concurrentRuns": "many"}}}',
        '{"users": {}}',
    ],
)
def test_a_malformed_limits_setting_is_a_configuration_error_naming_it(raw: str) -> None:
    with pytest.raises(ConfigurationError, match="LIMITS"):
        parse_limits(raw)


def test_every_key_is_optional_and_a_tenant_entry_overrides_the_tenant_defaults() -> None:
    config = parse_limits(
        '{"user": {"concurrentRuns": 2}, "tenant": {"concurrentRuns": 200, "tokensPerMonth": 1000},'
        ' "tenants": {"t-big": {"concurrentRuns": 800}}}'
    )
    assert config.for_tenant("t-big").as_json() == {"concurrentRuns": 800, "tokensPerMonth": 1000}
    assert config.for_tenant("other").as_json() == {"concurrentRuns": 200, "tokensPerMonth": 1000}
    assert config.user.as_json() == {"concurrentRuns": 2}
    assert parse_limits(None).user.as_json() == {} and parse_limits("{}").tenant.as_json() == {}


async def test_a_third_concurrent_run_is_refused_too_many_runs_and_nothing_of_it_is_stored() -> None:
    rig = Rig({"user": {"concurrentRuns": 2}}, Turn(text=["a"], delay_s=0.2), Turn(text=["b"], delay_s=0.2))
    await rig.admit("run-1", "th-1")
    await rig.admit("run-2", "th-2")
    with pytest.raises(TooManyRequests) as refused:
        await rig.admit("run-3", "th-3")
    assert refused.value.code == "too_many_runs" and refused.value.retry_after_s == 5
    assert refused.value.details == {"kind": "concurrentRuns", "scope": "user", "used": 2, "limit": 2}
    # nothing of the refused run: no thread, no run
    assert await rig.store.runs.get_run("t1", "run-3") is None
    with pytest.raises(NotFound):
        await rig.store.threads.get_thread(USER, "th-3")
    # once the two end, their slots are free again
    await rig.runs.wait_idle()
    view = await rig.counters.counters("t1", "user", "u1", rig.gate_windows())
    assert view.active_runs == frozenset()


async def test_a_token_budget_refuses_the_run_whose_reservation_does_not_fit_and_says_when_it_resets() -> None:
    budget = 2 * ESTIMATE + 100
    rig = Rig({"user": {"tokensPerDay": budget}}, Turn(text=["a"], input_tokens=1000, output_tokens=200))
    await rig.admit("run-1", "th-1")
    await rig.runs.wait_idle()
    # the run settled at what it used: 1200, not its reservation
    assert (await rig.counters.counters("t1", "user", "u1", rig.gate_windows())).day_tokens == 1200
    rig.model = ScriptedModel(Turn(text=["b"], delay_s=0.3))
    rig.worker = WorkerExecutor(rig.model, rig.store.threads, rig.store.audit, ToolRegistry())
    await rig.admit("run-2", "th-2")  # 1200 + ESTIMATE fits; the next reservation would not
    with pytest.raises(TooManyRequests) as refused:
        await rig.admit("run-3", "th-3")
    details = refused.value.details
    assert refused.value.code == "quota_exceeded"
    assert (details["kind"], details["scope"], details["limit"]) == ("tokensPerDay", "user", budget)
    assert details["used"] == 1200 + ESTIMATE and details["resetAt"] == "2026-12-03T00:00:00Z"
    assert refused.value.retry_after_s == 12 * 3600
    await rig.runs.wait_idle()


async def test_a_failed_run_gives_its_reservation_back() -> None:
    rig = Rig({"user": {"tokensPerDay": 10 * ESTIMATE}}, Turn(raise_error=RuntimeError("boom")))
    await rig.admit("run-1", "th-1")
    await rig.runs.wait_idle()
    run = await rig.store.runs.get_run("t1", "run-1")
    assert run is not None and run.status is RunStatus.FAILED
    view = await rig.counters.counters("t1", "user", "u1", rig.gate_windows())
    assert view.day_tokens == 0 and view.active_runs == frozenset()


async def test_a_retry_of_an_admitted_run_attaches_without_taking_another_slot() -> None:
    rig = Rig({"user": {"concurrentRuns": 1}}, Turn(text=["a"], delay_s=0.2))
    first = await rig.admit("run-1", "th-1")
    again = await rig.admit("run-1", "th-1")
    assert first.created and not again.created
    view = await rig.counters.counters("t1", "user", "u1", rig.gate_windows())
    assert view.active_runs == frozenset({"run-1"}) and view.day_tokens == ESTIMATE
    await rig.runs.wait_idle()


async def test_an_administrators_change_applies_at_the_next_reservation() -> None:
    rig = Rig({"user": {"concurrentRuns": 5}, "tenant": {"concurrentRuns": 10}}, Turn(text=["a"], delay_s=0.3))
    reports = UsageReports(rig.gate, rig.counters, parse_prices(None))
    await rig.admit("run-1", "th-1")  # the gate now remembers u1's limits (none of their own)
    await reports.set_user_limits(ADMIN, "u1", {"concurrentRuns": 1})
    with pytest.raises(TooManyRequests):
        await rig.admit("run-2", "th-2")
    assert (await reports.user_limits(ADMIN, "u1"))["effective"] == {"concurrentRuns": 1}
    await reports.delete_user_limits(ADMIN, "u1")
    assert (await reports.user_limits(ADMIN, "u1"))["effective"] == {"concurrentRuns": 5}
    await rig.runs.wait_idle()


async def test_an_administrator_cannot_go_above_the_tenant_nor_reach_an_unknown_user() -> None:
    rig = Rig({"tenant": {"concurrentRuns": 10, "tokensPerMonth": 1000}})
    reports = UsageReports(rig.gate, rig.counters, parse_prices(None))
    await rig.counters.set_user_limits("t1", "u1", None)  # u1 is known to the tenant
    with pytest.raises(InvalidRequest) as above:
        await reports.set_user_limits(ADMIN, "u1", {"concurrentRuns": 11})
    assert above.value.code == "limit_above_tenant"
    assert above.value.details == [{"limit": "concurrentRuns", "requested": 11, "tenantLimit": 10}]
    with pytest.raises(InvalidRequest):
        await reports.set_user_limits(ADMIN, "u1", {"tokensPerWeek": 1})
    # another tenant's user is the same 404 as a missing one
    await rig.counters.set_user_limits("t2", "victim", None)
    for user in ("victim", "nobody"):
        with pytest.raises(NotFound):
            await reports.user_limits(ADMIN, user)
        with pytest.raises(NotFound):
            await reports.set_user_limits(ADMIN, user, {"concurrentRuns": 1})
    assert (await rig.counters.user_limits("t2", "victim")).limits is None


async def test_concurrent_reservations_never_exceed_the_budget() -> None:
    budget = 5 * ESTIMATE
    rig = Rig({"user": {"tokensPerMonth": budget}})
    outcomes = await asyncio.gather(
        *(rig.gate.reserve(USER, f"run-{i}", interactive=True, estimate=ESTIMATE) for i in range(64)),
        return_exceptions=True,
    )
    taken = [o for o in outcomes if not isinstance(o, BaseException)]
    assert len(taken) == 5
    assert all(isinstance(o, TooManyRequests) for o in outcomes if isinstance(o, BaseException))
    assert (await rig.counters.counters("t1", "user", "u1", rig.gate_windows())).month_tokens == budget


async def test_the_usage_view_counts_tokens_by_model_with_cached_input_apart_and_an_estimated_cost() -> None:
    rig = Rig({"user": {"tokensPerDay": 2_000_000}}, Turn(text=["a"], input_tokens=1_000_000, output_tokens=0))
    await rig.admit("run-1", "th-1")
    await rig.runs.wait_idle()
    body = await UsageReports(rig.gate, rig.counters, parse_prices(None)).caller_usage(USER)
    assert body["day"]["tokens"] == {"qwen3.5-30b-a3b": {"input": 1_000_000, "cachedInput": 0, "output": 0}}
    assert body["day"]["runs"] == {"worker": 1} and body["month"]["estimatedCostUsd"] == pytest.approx(0.20)
    assert body["remaining"]["user"] == {"tokensPerDay": 1_000_000}


async def test_a_run_refused_for_a_busy_thread_gives_its_reservation_back() -> None:
    rig = Rig({"user": {"concurrentRuns": 5, "tokensPerDay": 10 * ESTIMATE}}, Turn(text=["a"], delay_s=0.3))
    await rig.admit("run-1", "th-1")
    with pytest.raises(Conflict):
        await rig.admit("run-2", "th-1")  # the same thread, busy with run-1
    view = await rig.counters.counters("t1", "user", "u1", rig.gate_windows())
    assert view.active_runs == frozenset({"run-1"}) and view.day_tokens == ESTIMATE
    await rig.runs.wait_idle()


async def test_the_sweeper_frees_the_slot_of_a_run_whose_process_stopped() -> None:
    rig = Rig({"user": {"concurrentRuns": 1}})
    # GIVEN a run admitted by a process that then died: its reservation holds the user's only slot
    request = await rig.gate.reserve(USER, "run-dead", interactive=True, estimate=ESTIMATE)
    rig.gate.hold(request)
    await rig.store.threads.open_and_claim(USER, "th-dead", "run-dead", stale_before=utc_now())
    await rig.store.runs.create_run(Run(run_id="run-dead", thread_id="th-dead", tenant_id="t1", user_id="u1"))
    with pytest.raises(TooManyRequests):
        await rig.gate.reserve(USER, "run-next", interactive=True, estimate=ESTIMATE)
    # WHEN the scheduled sweep finds its heartbeat stale
    sweeper = RunSweeper(
        rig.store.threads,
        rig.store.runs,
        rig.store.audit,
        rig.stream,
        stale_after=timedelta(seconds=30),
        on_run_ended=rig.gate.ended,
    )
    report = await sweeper.sweep(now=utc_now() + timedelta(minutes=5))
    # THEN the run is ended and its slot is free for the next run
    assert report.ended == ["run-dead"]
    assert (await rig.counters.counters("t1", "user", "u1", rig.gate_windows())).active_runs == frozenset()
    await rig.gate.reserve(USER, "run-next", interactive=True, estimate=ESTIMATE)
