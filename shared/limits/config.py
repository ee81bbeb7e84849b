"""The deployment's limits (``LIMITS``, one JSON setting) and a tenant administrator's per-user limits.

``LIMITS`` looks like ``{"user": {...}, "tenant": {...}, "tenants": {"<tenant id>": {...}}}``, where each ``{...}``
is a :class:`LimitSet` (``concurrentRuns``, ``runsPerMinute``, ``tokensPerDay``, ``tokensPerMonth``). Every key is
optional, and an absent key means unlimited. ``user`` applies to each user, ``tenant`` to the sum of a tenant's
users, and ``tenants`` overrides ``tenant`` for the tenants it names. A malformed value stops the process at
start-up with a :class:`~shared.errors.ConfigurationError` that names ``LIMITS`` and the field.

A tenant administrator may set a user's own :class:`LimitSet` (``PUT /api/v1/admin/users/{userId}/limits``); each
key replaces the deployment's ``user`` value for that user, and none may exceed the tenant's own limit of the same
kind (:func:`above_tenant`).
"""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from shared.errors import ConfigurationError

LimitKind = Literal["concurrentRuns", "runsPerMinute", "tokensPerDay", "tokensPerMonth"]
LIMIT_KINDS: tuple[LimitKind, ...] = ("concurrentRuns", "runsPerMinute", "tokensPerDay", "tokensPerMonth")


class LimitSet(BaseModel):
    """Limits of one scope (a user, or a tenant's users together); None: unlimited."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    concurrent_runs: int | None = Field(default=None, ge=1, le=100_000, alias="concurrentRuns")
    runs_per_minute: int | None = Field(default=None, ge=1, le=1_000_000, alias="runsPerMinute")
    tokens_per_day: int | None = Field(default=None, ge=1, alias="tokensPerDay")
    tokens_per_month: int | None = Field(default=None, ge=1, alias="tokensPerMonth")

    def value(self, kind: LimitKind) -> int | None:
        """The limit of ``kind`` (camelCase, as in ``LIMITS`` and the API)."""
        return {
            "concurrentRuns": self.concurrent_runs,
            "runsPerMinute": self.runs_per_minute,
            "tokensPerDay": self.tokens_per_day,
            "tokensPerMonth": self.tokens_per_month,
        }[kind]

    def over(self, base: LimitSet) -> LimitSet:
        """This set's keys, and ``base``'s where this one has none."""
        mine = self.model_dump(exclude_none=True)
        return LimitSet.model_validate({**base.model_dump(exclude_none=True), **mine})

    def as_json(self) -> dict[str, int]:
        """The set as the API and ``LIMITS`` spell it (camelCase; unlimited keys left out)."""
        return self.model_dump(by_alias=True, exclude_none=True)

    @property
    def counts_tokens(self) -> bool:
        return self.tokens_per_day is not None or self.tokens_per_month is not None


class LimitsConfig(BaseModel):
    """The whole ``LIMITS`` setting."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    user: LimitSet = LimitSet()
    tenant: LimitSet = LimitSet()
    tenants: dict[str, LimitSet] = {}

    def for_tenant(self, tenant_id: str) -> LimitSet:
        """The tenant's own limits: its entry in ``tenants`` over the ``tenant`` defaults."""
        own = self.tenants.get(tenant_id)
        return own.over(self.tenant) if own is not None else self.tenant

    def for_user(self, tenant_id: str, user_override: LimitSet | None) -> LimitSet:
        """A user's limits: the administrator's per-user set over the deployment's ``user`` defaults."""
        return user_override.over(self.user) if user_override is not None else self.user


def parse_limits(raw: str | None) -> LimitsConfig:
    """``LIMITS`` parsed and checked; unset or empty: no limits. Raises ``ConfigurationError`` naming the setting."""
    if raw is None or not raw.strip():
        return LimitsConfig()
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigurationError(f"LIMITS is not valid JSON: {exc.msg} at character {exc.pos}") from exc
    if not isinstance(data, dict):
        raise ConfigurationError("LIMITS must be a JSON object with optional keys user, tenant, tenants")
    try:
        return LimitsConfig.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise ConfigurationError(
            f"LIMITS is not valid: {where}: {first['msg']} (keys: user, tenant, tenants; each a set of "
            "concurrentRuns, runsPerMinute, tokensPerDay, tokensPerMonth, positive integers)"
        ) from exc


def above_tenant(user_set: LimitSet, tenant_set: LimitSet) -> list[dict[str, int | str]]:
    """The keys of a per-user set above the tenant's own limit of the same kind (empty: the set is allowed)."""
    problems: list[dict[str, int | str]] = []
    for kind in LIMIT_KINDS:
        wanted, ceiling = user_set.value(kind), tenant_set.value(kind)
        if wanted is not None and ceiling is not None and wanted > ceiling:
            problems.append({"limit": kind, "requested": wanted, "tenantLimit": ceiling})
    return problems
