"""The value types of limits and usage: what a reservation asks and holds, why one is refused, what a usage
record counts. They import only the base, so the ``UsageCounters`` port (``shared.limits.ports``) can name them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from shared.limits.config import LimitKind, LimitSet
from shared.limits.windows import Windows

Scope = Literal["user", "tenant"]


@dataclass(frozen=True)
class UserLimits:
    """A user's own limits as a tenant administrator set them (None: none set) and their version, which every
    change raises; a reservation names the version it assumed, so a change is seen by the next one."""

    version: int = 0
    limits: LimitSet | None = None


@dataclass(frozen=True)
class ScopeAsk:
    """What one scope's counter is asked for: the tokens to reserve, whether the run takes a slot and counts as a
    run of the minute, and the limits that must still hold afterwards."""

    limits: LimitSet
    tokens: int
    takes_slot: bool
    counts_run: bool


@dataclass(frozen=True)
class ReserveRequest:
    """One admission's reservation, on the user's counter and (when the tenant has limits) the tenant's."""

    tenant_id: str
    user_id: str
    run_id: str
    windows: Windows
    user: ScopeAsk
    user_limits_version: int
    tenant: ScopeAsk | None = None


@dataclass(frozen=True)
class Refusal:
    """The limit a reservation would break: which, in which scope, what is used and what the limit is."""

    kind: LimitKind
    scope: Scope
    used: int
    limit: int
    in_flight: int = 0
    """Other runs holding a slot in the scope (their reservations are in ``used``)."""


@dataclass(frozen=True)
class ReserveOutcome:
    """``refusal`` None and ``stale`` None: reserved. ``stale``: the user's limits changed since the request was
    built (nothing reserved; ask again with these)."""

    refusal: Refusal | None = None
    stale: UserLimits | None = None

    @property
    def reserved(self) -> bool:
        return self.refusal is None and self.stale is None


@dataclass(frozen=True)
class CounterView:
    """A scope's counters in the windows of one instant (the usage API, and the diagnosis of a refusal)."""

    day_tokens: int = 0
    month_tokens: int = 0
    runs_this_minute: int = 0
    active_runs: frozenset[str] = frozenset()
    user_limits: UserLimits = field(default_factory=UserLimits)
    known: bool = False
    """The counter exists: the user ran something with limits on, or an administrator set their limits."""


@dataclass(frozen=True)
class TokenCounts:
    """Tokens of one model: input not read from the provider's cache, cached input, output."""

    input: int = 0
    cached_input: int = 0
    output: int = 0

    @property
    def total(self) -> int:
        return self.input + self.cached_input + self.output


@dataclass(frozen=True)
class UsageRecord:
    """What one user used in one period (a day ``YYYY-MM-DD`` or a month ``YYYY-MM``): tokens by model, runs by
    executor."""

    tenant_id: str
    user_id: str
    period: str
    tokens: dict[str, TokenCounts] = field(default_factory=dict)
    runs: dict[str, int] = field(default_factory=dict)

    @property
    def total_tokens(self) -> int:
        return sum(counts.total for counts in self.tokens.values())


@dataclass(frozen=True)
class RunSpend:
    """A finished run's spend, as settlement records it."""

    executor: str
    tokens: dict[str, TokenCounts]

    @property
    def total(self) -> int:
        return sum(counts.total for counts in self.tokens.values())
