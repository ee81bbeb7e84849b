"""In-memory :class:`~shared.limits.ports.UsageCounters`: the unit tests' and the local runner's counters.

Each reservation checks and takes in one step with no ``await`` between, as the DynamoDB adapter's conditional
write does; the contract suite (tests/contract/test_usage_counters_contract.py) runs the same cases on both.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from shared.limits.check import first_broken
from shared.limits.config import LimitSet
from shared.limits.models import (
    CounterView,
    ReserveOutcome,
    ReserveRequest,
    RunSpend,
    Scope,
    ScopeAsk,
    TokenCounts,
    UsageRecord,
    UserLimits,
)
from shared.limits.windows import Windows


@dataclass
class _Counter:
    tokens: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    runs: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    active: set[str] = field(default_factory=set)
    user_limits: UserLimits = field(default_factory=UserLimits)

    def view(self, windows: Windows) -> CounterView:
        return CounterView(
            day_tokens=self.tokens["d" + windows.day],
            month_tokens=self.tokens["m" + windows.month],
            runs_this_minute=self.runs[windows.minute],
            active_runs=frozenset(self.active),
            user_limits=self.user_limits,
            known=True,
        )

    def take(self, ask: ScopeAsk, run_id: str, windows: Windows, sign: int = 1) -> None:
        self.tokens["d" + windows.day] += sign * ask.tokens
        self.tokens["m" + windows.month] += sign * ask.tokens
        if ask.counts_run:
            self.runs[windows.minute] += sign
        if ask.takes_slot:
            if sign > 0:
                self.active.add(run_id)
            else:
                self.active.discard(run_id)


@dataclass
class _Usage:
    tokens: dict[str, TokenCounts] = field(default_factory=dict)
    runs: dict[str, int] = field(default_factory=lambda: defaultdict(int))


class InMemoryUsageCounters:
    def __init__(self) -> None:
        self._counters: dict[tuple[str, str], _Counter] = defaultdict(_Counter)
        self._usage: dict[tuple[str, str, str], _Usage] = defaultdict(_Usage)

    def _key(self, tenant_id: str, scope: Scope, user_id: str | None) -> tuple[str, str]:
        return (tenant_id, f"U#{user_id}" if scope == "user" else "TENANT")

    async def reserve(self, request: ReserveRequest) -> ReserveOutcome:
        user = self._counters[self._key(request.tenant_id, "user", request.user_id)]
        if user.user_limits.version != request.user_limits_version:
            return ReserveOutcome(stale=user.user_limits)
        refusal = first_broken(request.user, user.view(request.windows), "user", request.run_id)
        if refusal is None and request.tenant is not None:
            tenant = self._counters[self._key(request.tenant_id, "tenant", None)]
            refusal = first_broken(request.tenant, tenant.view(request.windows), "tenant", request.run_id)
        if refusal is not None:
            return ReserveOutcome(refusal=refusal)
        user.take(request.user, request.run_id, request.windows)
        if request.tenant is not None:
            self._counters[self._key(request.tenant_id, "tenant", None)].take(
                request.tenant, request.run_id, request.windows
            )
        return ReserveOutcome()

    async def settle(self, request: ReserveRequest, spend: RunSpend, *, windows: Windows) -> None:
        await self.release(request)
        used = ScopeAsk(limits=LimitSet(), tokens=spend.total, takes_slot=False, counts_run=False)
        self._counters[self._key(request.tenant_id, "user", request.user_id)].take(used, request.run_id, windows)
        if request.tenant is not None:
            self._counters[self._key(request.tenant_id, "tenant", None)].take(used, request.run_id, windows)
        # The run of the minute stays counted: release gave it back, so count it again.
        if request.user.counts_run:
            self._counters[self._key(request.tenant_id, "user", request.user_id)].runs[request.windows.minute] += 1
        if request.tenant is not None and request.tenant.counts_run:
            self._counters[self._key(request.tenant_id, "tenant", None)].runs[request.windows.minute] += 1
        for period in (windows.now.strftime("%Y-%m-%d"), windows.month_label):
            record = self._usage[(request.tenant_id, request.user_id, period)]
            for model, counts in spend.tokens.items():
                old = record.tokens.get(model, TokenCounts())
                record.tokens[model] = TokenCounts(
                    old.input + counts.input, old.cached_input + counts.cached_input, old.output + counts.output
                )
            record.runs[spend.executor] += 1

    async def release(self, request: ReserveRequest) -> None:
        self._counters[self._key(request.tenant_id, "user", request.user_id)].take(
            request.user, request.run_id, request.windows, sign=-1
        )
        if request.tenant is not None:
            self._counters[self._key(request.tenant_id, "tenant", None)].take(
                request.tenant, request.run_id, request.windows, sign=-1
            )

    async def release_slot(self, tenant_id: str, user_id: str, run_id: str) -> None:
        self._counters[self._key(tenant_id, "user", user_id)].active.discard(run_id)
        self._counters[self._key(tenant_id, "tenant", None)].active.discard(run_id)

    async def counters(self, tenant_id: str, scope: Scope, user_id: str | None, windows: Windows) -> CounterView:
        key = self._key(tenant_id, scope, user_id)
        return self._counters[key].view(windows) if key in self._counters else CounterView()

    async def user_limits(self, tenant_id: str, user_id: str) -> UserLimits:
        counter = self._counters.get(self._key(tenant_id, "user", user_id))
        return counter.user_limits if counter is not None else UserLimits()

    async def set_user_limits(self, tenant_id: str, user_id: str, limits: LimitSet | None) -> UserLimits:
        counter = self._counters[self._key(tenant_id, "user", user_id)]
        counter.user_limits = UserLimits(version=counter.user_limits.version + 1, limits=limits)
        return counter.user_limits

    async def usage(self, tenant_id: str, user_id: str, period: str) -> UsageRecord:
        record = self._usage.get((tenant_id, user_id, period))
        if record is None:
            return UsageRecord(tenant_id, user_id, period)
        return UsageRecord(tenant_id, user_id, period, dict(record.tokens), dict(record.runs))

    async def tenant_usage(self, tenant_id: str, month: str) -> list[UsageRecord]:
        users = sorted(user for (tenant, user, period) in self._usage if tenant == tenant_id and period == month)
        return [await self.usage(tenant_id, user, month) for user in users]
