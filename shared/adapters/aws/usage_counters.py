"""DynamoDB adapter for :class:`~shared.limits.ports.UsageCounters` (same single table; docs/storage.md, "Limits and
usage").

Items:

- a scope's counter: ``PK = T#{tenant}#LIMITS``, ``SK = U#{user}`` (a user) or ``TENANT`` (the tenant's users
  together). Tokens of a window under an attribute named by the window (``tok_d_YYYYMMDD``, ``tok_m_YYYYMM``), runs
  of a minute under ``runs_YYYYMMDDHHMM``, the runs holding a slot as the string set ``active``; on a user's
  counter also the administrator's limits ``lim`` and their version ``lver``. A new window starts at zero with no
  reset write; settlement removes the attributes of past windows.
- a user's usage: ``PK = T#{tenant}#USAGE#{YYYY-MM}``, ``SK = M#U#{user}`` (the month) and
  ``SK = D#{YYYY-MM-DD}#U#{user}`` (a day), with ``in|{model}``, ``cin|{model}``, ``out|{model}`` and
  ``runs|{executor}``; they expire (``expires_at``) after the usage retention.

A reservation is one conditional ``UpdateItem`` per scope: the condition says that every limit still holds once it
is taken (``size(active) < :max``, ``tok_d_... <= :limit_minus_reserved``...) and, on a user's counter, that the
limits it was built from are still the user's (``lver``). Two instances can never both take the last slot or the
last tokens. A refused write is explained by one read (the refusal path only).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from functools import partial
from typing import Any

from botocore.exceptions import ClientError

from shared.adapters.aws import dynamo_codec as codec
from shared.adapters.aws.table_adapter import TableAdapter
from shared.limits.check import first_broken
from shared.limits.config import LimitSet
from shared.limits.models import (
    CounterView,
    Refusal,
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
from shared.models import utc_now

RESERVE_ATTEMPTS = 3
"""A refused write whose read then shows room (another run ended between the two) is tried again this often."""
WINDOW_PREFIXES = ("tok_d_", "tok_m_", "runs_")


def _failed_condition(exc: ClientError) -> bool:
    return exc.response["Error"]["Code"] == "ConditionalCheckFailedException"


def _counter_key(tenant_id: str, scope: Scope, user_id: str | None) -> Any:
    return codec.to_item({"PK": f"T#{tenant_id}#LIMITS", "SK": f"U#{user_id}" if scope == "user" else "TENANT"})


def _window_names(windows: Windows) -> tuple[str, str, str]:
    return f"tok_d_{windows.day}", f"tok_m_{windows.month}", f"runs_{windows.minute}"


class _Update:
    """An update expression built clause by clause, with its names and values."""

    def __init__(self) -> None:
        self.adds: list[str] = []
        self.deletes: list[str] = []
        self.conditions: list[str] = []
        self.names: dict[str, str] = {}
        self.values: dict[str, Any] = {}

    def name(self, attribute: str) -> str:
        placeholder = f"#n{len(self.names)}"
        self.names[placeholder] = attribute
        return placeholder

    def value(self, value: Any) -> str:
        placeholder = f":v{len(self.values)}"
        self.values[placeholder] = value
        return placeholder

    def add(self, attribute: str, amount: Any) -> None:
        self.adds.append(f"{self.name(attribute)} {self.value(amount)}")

    def expression(self) -> str:
        parts = []
        if self.adds:
            parts.append("ADD " + ", ".join(self.adds))
        if self.deletes:
            parts.append("DELETE " + ", ".join(self.deletes))
        return " ".join(parts)

    def request(self, table: str, key: Any, **extra: Any) -> dict[str, Any]:
        request: dict[str, Any] = {"TableName": table, "Key": key, "UpdateExpression": self.expression(), **extra}
        if self.conditions:
            request["ConditionExpression"] = " AND ".join(self.conditions)
        if self.names:
            request["ExpressionAttributeNames"] = self.names
        if self.values:
            request["ExpressionAttributeValues"] = codec.to_item(self.values)
        return request


def _taking(ask: ScopeAsk, run_id: str, windows: Windows, *, sign: int = 1) -> _Update:
    """The update that takes (or, ``sign`` -1, gives back) ``ask`` on a counter."""
    update = _Update()
    day, month, minute = _window_names(windows)
    update.add(day, sign * ask.tokens)
    update.add(month, sign * ask.tokens)
    if ask.counts_run:
        update.add(minute, sign)
    if ask.takes_slot:
        if sign > 0:
            update.adds.append(f"active {update.value({run_id})}")
        else:
            update.deletes.append(f"active {update.value({run_id})}")
    return update


def _with_limits(update: _Update, ask: ScopeAsk, windows: Windows, run_id: str) -> bool:
    """Add the conditions that every limit still holds once ``ask`` is taken; False when one cannot hold at all."""
    day, month, minute = _window_names(windows)
    limits = ask.limits
    if ask.takes_slot and limits.concurrent_runs is not None:
        bound, held = update.value(limits.concurrent_runs), update.value(run_id)
        # A retry of a run that holds its slot already takes no other (the set does not grow).
        update.conditions.append(
            f"(attribute_not_exists(active) OR size(active) < {bound} OR contains(active, {held}))"
        )
    if ask.counts_run and limits.runs_per_minute is not None:
        n = update.name(minute)
        update.conditions.append(f"(attribute_not_exists({n}) OR {n} < {update.value(limits.runs_per_minute)})")
    for attribute, limit in ((day, limits.tokens_per_day), (month, limits.tokens_per_month)):
        if limit is None:
            continue
        if ask.tokens > limit:
            return False
        n = update.name(attribute)
        update.conditions.append(f"(attribute_not_exists({n}) OR {n} <= {update.value(limit - ask.tokens)})")
    return True


def _view(data: dict[str, Any], windows: Windows) -> CounterView:
    day, month, minute = _window_names(windows)
    lim = data.get("lim")
    return CounterView(
        day_tokens=int(data.get(day, 0)),
        month_tokens=int(data.get(month, 0)),
        runs_this_minute=int(data.get(minute, 0)),
        active_runs=frozenset(data.get("active", set())),
        user_limits=UserLimits(
            version=int(data.get("lver", 0)), limits=LimitSet.model_validate(lim) if lim is not None else None
        ),
        known=bool(data),
    )


class DynamoDBUsageCounters(TableAdapter):
    """The counters and usage records on the main table (the module docstring lists the items)."""

    def __init__(self, table_name: str, client_factory: Any, *, usage_retention: timedelta) -> None:
        super().__init__(table_name, client_factory)
        self._usage_retention = usage_retention

    async def reserve(self, request: ReserveRequest) -> ReserveOutcome:
        user_take = self._reserve_scope(request, "user", request.user)
        if request.tenant is None:
            return await user_take
        user_outcome, tenant_outcome = await asyncio.gather(
            user_take, self._reserve_scope(request, "tenant", request.tenant)
        )
        if user_outcome.reserved and tenant_outcome.reserved:
            return user_outcome
        # One scope refused: give back what the other took, before the caller hears of it.
        if user_outcome.reserved:
            await self._give_back(request, "user", request.user)
            return tenant_outcome
        if tenant_outcome.reserved:
            await self._give_back(request, "tenant", request.tenant)
        return user_outcome

    async def _reserve_scope(self, request: ReserveRequest, scope: Scope, ask: ScopeAsk) -> ReserveOutcome:
        windows = request.windows
        user_id = request.user_id if scope == "user" else None
        for _ in range(RESERVE_ATTEMPTS):
            update = _taking(ask, request.run_id, windows)
            possible = _with_limits(update, ask, windows, request.run_id)
            if scope == "user":
                version = update.value(request.user_limits_version)
                update.conditions.append(f"(attribute_not_exists(lver) OR lver = {version})")
            if possible:
                try:
                    args = update.request(self._table, _counter_key(request.tenant_id, scope, user_id))
                    await self._call(partial(self.client.update_item, **args))
                    return ReserveOutcome()
                except ClientError as exc:
                    if not _failed_condition(exc):
                        raise
            view = await self.counters(request.tenant_id, scope, user_id, windows)
            if scope == "user" and view.user_limits.version != request.user_limits_version:
                return ReserveOutcome(stale=view.user_limits)
            refusal = first_broken(ask, view, scope, request.run_id)
            if refusal is not None:
                return ReserveOutcome(refusal=refusal)
            if not possible:  # pragma: no cover - first_broken finds the limit the reservation alone exceeds
                break
        return ReserveOutcome(refusal=_last_resort(ask, scope))

    async def _give_back(self, request: ReserveRequest, scope: Scope, ask: ScopeAsk) -> None:
        update = _taking(ask, request.run_id, request.windows, sign=-1)
        key = _counter_key(request.tenant_id, scope, request.user_id if scope == "user" else None)
        await self._call(lambda: self.client.update_item(**update.request(self._table, key)))

    async def release(self, request: ReserveRequest) -> None:
        parts = [self._give_back(request, "user", request.user)]
        if request.tenant is not None:
            parts.append(self._give_back(request, "tenant", request.tenant))
        await asyncio.gather(*parts)

    async def settle(self, request: ReserveRequest, spend: RunSpend, *, windows: Windows) -> None:
        parts = [self._settle_scope(request, "user", request.user, spend, windows)]
        if request.tenant is not None:
            parts.append(self._settle_scope(request, "tenant", request.tenant, spend, windows))
        parts.extend(self._record_usage(request, spend, windows, period) for period in ("day", "month"))
        await asyncio.gather(*parts)

    async def _settle_scope(
        self, request: ReserveRequest, scope: Scope, ask: ScopeAsk, spend: RunSpend, windows: Windows
    ) -> None:
        deltas: dict[str, int] = {}
        for attribute, amount in zip(
            _window_names(request.windows)[:2] + _window_names(windows)[:2],
            (-ask.tokens, -ask.tokens, spend.total, spend.total),
            strict=True,
        ):
            deltas[attribute] = deltas.get(attribute, 0) + amount
        update = _Update()
        for attribute, amount in deltas.items():
            update.add(attribute, amount)
        if ask.takes_slot:
            update.deletes.append(f"active {update.value({request.run_id})}")
        user_id = request.user_id if scope == "user" else None
        key = _counter_key(request.tenant_id, scope, user_id)
        resp = await self._call(
            lambda: self.client.update_item(**update.request(self._table, key, ReturnValues="ALL_NEW"))
        )
        current = set(_window_names(windows)) | set(_window_names(request.windows))
        stale = [
            name for name in resp.get("Attributes", {}) if name.startswith(WINDOW_PREFIXES) and name not in current
        ]
        if stale:
            names = {f"#s{i}": name for i, name in enumerate(stale)}
            await self._call(
                lambda: self.client.update_item(
                    TableName=self._table,
                    Key=key,
                    UpdateExpression="REMOVE " + ", ".join(names),
                    ExpressionAttributeNames=names,
                )
            )

    async def _record_usage(self, request: ReserveRequest, spend: RunSpend, windows: Windows, period: str) -> None:
        month = windows.month_label
        sk = f"M#U#{request.user_id}" if period == "month" else f"D#{windows.now:%Y-%m-%d}#U#{request.user_id}"
        update = _Update()
        for model, counts in spend.tokens.items():
            update.add(f"in|{model}", counts.input)
            update.add(f"cin|{model}", counts.cached_input)
            update.add(f"out|{model}", counts.output)
        update.add(f"runs|{spend.executor}", 1)
        sets = (
            f" SET user_id = {update.value(request.user_id)},"
            f" expires_at = {update.value(codec.expires_at(windows.now, self._usage_retention))}"
        )
        request_args = update.request(
            self._table, codec.to_item({"PK": f"T#{request.tenant_id}#USAGE#{month}", "SK": sk})
        )
        request_args["UpdateExpression"] += sets
        await self._call(lambda: self.client.update_item(**request_args))

    async def release_slot(self, tenant_id: str, user_id: str, run_id: str) -> None:
        async def free(scope: Scope) -> None:
            try:
                await self._call(
                    lambda: self.client.update_item(
                        TableName=self._table,
                        Key=_counter_key(tenant_id, scope, user_id if scope == "user" else None),
                        UpdateExpression="DELETE active :r",
                        ConditionExpression="attribute_exists(PK)",
                        ExpressionAttributeValues=codec.to_item({":r": {run_id}}),
                    )
                )
            except ClientError as exc:
                if not _failed_condition(exc):
                    raise

        await asyncio.gather(free("user"), free("tenant"))

    async def counters(self, tenant_id: str, scope: Scope, user_id: str | None, windows: Windows) -> CounterView:
        resp = await self._call(
            lambda: self.client.get_item(
                TableName=self._table, Key=_counter_key(tenant_id, scope, user_id), ConsistentRead=True
            )
        )
        return _view(codec.from_item(resp.get("Item", {})), windows)

    async def user_limits(self, tenant_id: str, user_id: str) -> UserLimits:
        resp = await self._call(
            lambda: self.client.get_item(
                TableName=self._table,
                Key=_counter_key(tenant_id, "user", user_id),
                ConsistentRead=True,
                ProjectionExpression="lver, lim",
            )
        )
        return _view(codec.from_item(resp.get("Item", {})), Windows.at(utc_now())).user_limits

    async def set_user_limits(self, tenant_id: str, user_id: str, limits: LimitSet | None) -> UserLimits:
        values: dict[str, Any] = {":one": 1}
        if limits is None:
            expression = "REMOVE lim ADD lver :one"
        else:
            expression, values[":l"] = "SET lim = :l ADD lver :one", limits.as_json()
        resp = await self._call(
            lambda: self.client.update_item(
                TableName=self._table,
                Key=_counter_key(tenant_id, "user", user_id),
                UpdateExpression=expression,
                ExpressionAttributeValues=codec.to_item(values),
                ReturnValues="ALL_NEW",
            )
        )
        return _view(codec.from_item(resp["Attributes"]), Windows.at(utc_now())).user_limits

    async def usage(self, tenant_id: str, user_id: str, period: str) -> UsageRecord:
        month = period[:7]
        sk = f"M#U#{user_id}" if len(period) == 7 else f"D#{period}#U#{user_id}"
        resp = await self._call(
            lambda: self.client.get_item(
                TableName=self._table, Key=codec.to_item({"PK": f"T#{tenant_id}#USAGE#{month}", "SK": sk})
            )
        )
        return _record(tenant_id, user_id, period, codec.from_item(resp.get("Item", {})))

    async def tenant_usage(self, tenant_id: str, month: str) -> list[UsageRecord]:
        records: list[UsageRecord] = []
        start: dict[str, Any] | None = None
        while True:
            args: dict[str, Any] = {
                "TableName": self._table,
                "KeyConditionExpression": "PK = :pk AND begins_with(SK, :m)",
                "ExpressionAttributeValues": codec.to_item({":pk": f"T#{tenant_id}#USAGE#{month}", ":m": "M#U#"}),
            }
            if start:
                args["ExclusiveStartKey"] = start
            resp = await self._call(partial(self.client.query, **args))
            for item in resp.get("Items", []):
                data = codec.from_item(item)
                records.append(_record(tenant_id, str(data["user_id"]), month, data))
            start = resp.get("LastEvaluatedKey")
            if not start:
                return sorted(records, key=lambda r: r.user_id)


def _record(tenant_id: str, user_id: str, period: str, data: dict[str, Any]) -> UsageRecord:
    models = {name.split("|", 1)[1] for name in data if name.startswith(("in|", "cin|", "out|"))}
    tokens = {
        model: TokenCounts(
            input=int(data.get(f"in|{model}", 0)),
            cached_input=int(data.get(f"cin|{model}", 0)),
            output=int(data.get(f"out|{model}", 0)),
        )
        for model in sorted(models)
    }
    runs = {name.split("|", 1)[1]: int(value) for name, value in data.items() if name.startswith("runs|")}
    return UsageRecord(tenant_id, user_id, period, tokens, runs)


def _last_resort(ask: ScopeAsk, scope: Scope) -> Refusal:
    """A scope still refused after every attempt though its counters show room (a storm of runs on one counter):
    refused as busy, which a client retries shortly."""
    return Refusal("concurrentRuns", scope, ask.limits.concurrent_runs or 0, ask.limits.concurrent_runs or 0)
