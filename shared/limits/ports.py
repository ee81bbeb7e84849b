"""The limits port: the counters admission reserves against, the usage records settlement writes, and a tenant
administrator's per-user limits.

Fake: ``InMemoryUsageCounters`` (shared/adapters/in_memory/usage.py); adapter: ``DynamoDBUsageCounters``
(shared/adapters/aws/usage_counters.py); contract: tests/contract/test_usage_counters_contract.py.
Its value types live in ``shared.limits.models`` (which imports no port).
"""

from __future__ import annotations

from typing import Protocol

from shared.limits.config import LimitSet
from shared.limits.models import CounterView, ReserveOutcome, ReserveRequest, RunSpend, Scope, UsageRecord, UserLimits
from shared.limits.windows import Windows


class UsageCounters(Protocol):
    async def reserve(self, request: ReserveRequest) -> ReserveOutcome:
        """Reserve atomically on the user's counter and, when asked, the tenant's: each scope is one conditional
        write that either takes its tokens, its slot and its run of the minute with every limit still held, or
        takes nothing. When one scope refuses, what the other took is given back before this returns."""
        ...

    async def settle(self, request: ReserveRequest, spend: RunSpend, *, windows: Windows) -> None:
        """The run ended: its reservation is replaced by what it used (in the windows of ``windows``), its slot is
        freed, and its usage is added to the user's day and month usage records."""
        ...

    async def release(self, request: ReserveRequest) -> None:
        """A reservation whose run never started (its admission was refused later): everything given back."""
        ...

    async def release_slot(self, tenant_id: str, user_id: str, run_id: str) -> None:
        """Free a run's slot in both scopes, whatever its state (the sweep or takeover of a run whose process
        stopped); freeing a slot that is free already changes nothing."""
        ...

    async def counters(self, tenant_id: str, scope: Scope, user_id: str | None, windows: Windows) -> CounterView:
        """A scope's counters in ``windows`` (``user_id`` None for the tenant scope)."""
        ...

    async def user_limits(self, tenant_id: str, user_id: str) -> UserLimits:
        """The user's own limits and their version (version 0, no limits: never set)."""
        ...

    async def set_user_limits(self, tenant_id: str, user_id: str, limits: LimitSet | None) -> UserLimits:
        """Set (or with None, remove) the user's own limits; the version goes up either way."""
        ...

    async def usage(self, tenant_id: str, user_id: str, period: str) -> UsageRecord:
        """The user's usage record of a day (``YYYY-MM-DD``) or month (``YYYY-MM``); empty when none."""
        ...

    async def tenant_usage(self, tenant_id: str, month: str) -> list[UsageRecord]:
        """Every user's usage record of a month (``YYYY-MM``) in the tenant, by user id."""
        ...
