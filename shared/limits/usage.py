"""What the usage API shows: a caller's day and month (tokens by model, runs by executor, limits, what remains, an
estimated cost), a tenant's month per user (cost allocation), and a tenant administrator's per-user limits.

The estimated cost uses a price table: ``MODEL_PRICES`` (JSON ``{"<model>": {"input": 0.2, "cachedInput": 0.04,
"output": 1.6}}``, USD per million tokens, by the logical model id the profiles name), else
:data:`DEFAULT_PRICES`, the dated table of docs/benchmarks.md §6 (``bench/bill.py``). A model missing from the
table costs nothing in the estimate and is listed under ``unpricedModels``.
"""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from shared.errors import ConfigurationError, InvalidRequest, NotFound
from shared.limits.config import LIMIT_KINDS, LimitSet, above_tenant
from shared.limits.gate import ONE_RUN_TOKENS, LimitGate
from shared.limits.models import CounterView, UsageRecord
from shared.limits.ports import UsageCounters
from shared.limits.windows import Windows
from shared.models import Identity, utc_now


class ModelPrice(BaseModel):
    """USD per million tokens."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    input: float = Field(ge=0)
    cached_input: float = Field(ge=0, alias="cachedInput")
    output: float = Field(ge=0)


DEFAULT_PRICES_AS_OF = "2026-12-01"
DEFAULT_PRICES: dict[str, ModelPrice] = {
    # DashScope (Model Studio, international) list prices as assumed in docs/benchmarks.md §6; cached input at 20 %.
    "qwen3.5-30b-a3b": ModelPrice(input=0.20, cached_input=0.04, output=1.60),
    "qwen3.5-35b-a3b": ModelPrice(input=0.20, cached_input=0.04, output=1.60),
    "qwen3.5-flash": ModelPrice(input=0.10, cached_input=0.02, output=0.40),
}


@dataclass(frozen=True)
class PriceTable:
    prices: dict[str, ModelPrice]
    as_of: str

    def cost(self, record: UsageRecord) -> tuple[float, list[str]]:
        """The record's estimated cost in USD, and the models the table has no price for."""
        total, unpriced = 0.0, []
        for model, counts in record.tokens.items():
            price = self.prices.get(model)
            if price is None:
                unpriced.append(model)
                continue
            total += (
                counts.input * price.input + counts.cached_input * price.cached_input + counts.output * price.output
            ) / 1e6
        return round(total, 6), unpriced


def parse_prices(raw: str | None) -> PriceTable:
    """``MODEL_PRICES`` parsed; unset: the default table. Raises ``ConfigurationError`` naming the setting."""
    if raw is None or not raw.strip():
        return PriceTable(DEFAULT_PRICES, DEFAULT_PRICES_AS_OF)
    try:
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError("must be a JSON object of model id to prices")
        prices = {str(model): ModelPrice.model_validate(price) for model, price in data.items()}
    except (ValueError, ValidationError) as exc:
        raise ConfigurationError(f"MODEL_PRICES is not valid: {exc}") from exc
    return PriceTable(prices, "MODEL_PRICES")


MONTH = re.compile(r"^\d{4}-(0[1-9]|1[0-2])$")
USER_ID = re.compile(r"^[A-Za-z0-9._:@|+-]{1,200}$")


def _record_json(record: UsageRecord, prices: PriceTable) -> dict[str, Any]:
    cost, unpriced = prices.cost(record)
    body: dict[str, Any] = {
        "period": record.period,
        "tokens": {
            model: {"input": c.input, "cachedInput": c.cached_input, "output": c.output}
            for model, c in record.tokens.items()
        },
        "totalTokens": record.total_tokens,
        "runs": dict(record.runs),
        "estimatedCostUsd": cost,
    }
    if unpriced:
        body["unpricedModels"] = unpriced
    return body


def _remaining(limits: LimitSet, view: CounterView) -> dict[str, int]:
    used = {
        "concurrentRuns": len(view.active_runs),
        "runsPerMinute": view.runs_this_minute,
        "tokensPerDay": view.day_tokens,
        "tokensPerMonth": view.month_tokens,
    }
    return {kind: max(0, limit - used[kind]) for kind in LIMIT_KINDS if (limit := limits.value(kind)) is not None}


class UsageReports:
    """The usage endpoints' answers (the module docstring says what each holds)."""

    def __init__(self, gate: LimitGate | None, counters: UsageCounters, prices: PriceTable) -> None:
        self._gate = gate
        self._counters = counters
        self._prices = prices

    async def caller_usage(self, caller: Identity) -> dict[str, Any]:
        """The caller's usage today and this month, their limits, what remains, and when the windows reset."""
        windows = Windows.at(self._gate.now() if self._gate is not None else utc_now())
        tenant, user = caller.tenant_id, caller.user_id
        day = await self._counters.usage(tenant, user, windows.now.strftime("%Y-%m-%d"))
        month = await self._counters.usage(tenant, user, windows.month_label)
        body: dict[str, Any] = {
            "limitsEnabled": self._gate is not None,
            "day": _record_json(day, self._prices),
            "month": _record_json(month, self._prices),
            "resets": {
                "day": windows.day_resets_at.isoformat().replace("+00:00", "Z"),
                "month": windows.month_resets_at.isoformat().replace("+00:00", "Z"),
            },
            "prices": {"asOf": self._prices.as_of, "unit": "USD per million tokens"},
        }
        if self._gate is None:
            return body
        config = self._gate.config
        user_view = await self._counters.counters(tenant, "user", user, windows)
        user_limits = config.for_user(tenant, user_view.user_limits.limits)
        tenant_limits = config.for_tenant(tenant)
        body["limits"] = {"user": user_limits.as_json(), "tenant": tenant_limits.as_json()}
        body["counted"] = {
            "tokensToday": user_view.day_tokens,
            "tokensThisMonth": user_view.month_tokens,
            "activeRuns": len(user_view.active_runs),
            "runsThisMinute": user_view.runs_this_minute,
        }
        remaining: dict[str, Any] = {"user": _remaining(user_limits, user_view)}
        if tenant_limits.as_json():
            tenant_view = await self._counters.counters(tenant, "tenant", None, windows)
            remaining["tenant"] = _remaining(tenant_limits, tenant_view)
        body["remaining"] = remaining
        return body

    async def tenant_usage(self, admin: Identity, month: str, *, fmt: str) -> tuple[str, str]:
        """The tenant's usage of ``month`` per user: ``(body, media type)``, JSON lines or CSV."""
        if not MONTH.match(month):
            raise InvalidRequest("month must be YYYY-MM", code="invalid_request")
        records = await self._counters.tenant_usage(admin.tenant_id, month)
        if fmt == "csv":
            out = io.StringIO()
            writer = csv.writer(out, lineterminator="\n")
            writer.writerow(
                ["month", "userId", "model", "inputTokens", "cachedInputTokens", "outputTokens", "estimatedCostUsd"]
            )
            for record in records:
                for model, counts in record.tokens.items():
                    one = UsageRecord(record.tenant_id, record.user_id, month, {model: counts})
                    cost, _ = self._prices.cost(one)
                    writer.writerow(
                        [month, record.user_id, model, counts.input, counts.cached_input, counts.output, cost]
                    )
            return out.getvalue(), "text/csv"
        lines = [
            json.dumps({"month": month, "userId": r.user_id, **_record_json(r, self._prices)}, separators=(",", ":"))
            for r in records
        ]
        return "".join(line + "\n" for line in lines), "application/x-ndjson"

    def _gate_on(self) -> LimitGate:
        if self._gate is None:
            raise NotFound("limits are not enabled on this deployment (LIMITS is unset)", code="not_found")
        return self._gate

    async def user_limits(self, admin: Identity, user_id: str) -> dict[str, Any]:
        """A user of the admin's tenant: their own limits and the limits in force; 404 for a user the tenant does
        not know (another tenant's user is not distinguishable from a missing one)."""
        gate = self._gate_on()
        view = await self._known_user(admin, user_id)
        own = view.user_limits.limits
        return {
            "userId": user_id,
            "limits": own.as_json() if own is not None else None,
            "effective": gate.config.for_user(admin.tenant_id, own).as_json(),
            "tenant": gate.config.for_tenant(admin.tenant_id).as_json(),
            "version": view.user_limits.version,
        }

    async def set_user_limits(self, admin: Identity, user_id: str, body: Any) -> dict[str, Any]:
        """Set a user's own limits: 422 for an unknown key or a value above the tenant's own limit."""
        gate = self._gate_on()
        try:
            wanted = LimitSet.model_validate(body)
        except ValidationError as exc:
            problems = [{"loc": list(e["loc"]), "msg": e["msg"]} for e in exc.errors()]
            raise InvalidRequest("limits are not valid", code="invalid_request", details=problems) from exc
        too_high = above_tenant(wanted, gate.config.for_tenant(admin.tenant_id))
        if too_high:
            raise InvalidRequest(
                "a user's limit may not exceed the tenant's own", code="limit_above_tenant", details=too_high
            )
        await self._known_user(admin, user_id)
        await self._counters.set_user_limits(admin.tenant_id, user_id, wanted)
        view = await self.user_limits(admin, user_id)
        warnings = budget_warnings(wanted)
        return {**view, "warnings": warnings} if warnings else view

    async def delete_user_limits(self, admin: Identity, user_id: str) -> None:
        """Remove a user's own limits: the deployment's user limits apply again."""
        self._gate_on()
        await self._known_user(admin, user_id)
        await self._counters.set_user_limits(admin.tenant_id, user_id, None)

    async def _known_user(self, admin: Identity, user_id: str) -> CounterView:
        if not USER_ID.match(user_id):
            raise NotFound("user not found")
        view = await self._counters.counters(admin.tenant_id, "user", user_id, Windows.at(utc_now()))
        if not view.known:
            raise NotFound("user not found")
        return view


def budget_warnings(limits: LimitSet) -> list[dict[str, Any]]:
    """A warning per token budget below one typical run (``ONE_RUN_TOKENS``): it is accepted (an administrator may
    mean to stop a user), but no chat run would ever be admitted under it."""
    budgets = {"tokensPerDay": limits.tokens_per_day, "tokensPerMonth": limits.tokens_per_month}
    return [
        {
            "limit": kind,
            "value": value,
            "typicalRun": ONE_RUN_TOKENS,
            "message": f"{kind} {value:,} is below one typical run ({ONE_RUN_TOKENS:,} tokens reserved by a first "
            "message on a default chat profile): this user's runs would all be refused",
        }
        for kind, value in budgets.items()
        if value is not None and value < ONE_RUN_TOKENS
    ]
