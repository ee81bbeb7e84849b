"""``LimitGate``: what the run path asks of the limits. Reserve at admission, settle at the end, release a run that
never ran, free the slot of a run whose process stopped.

The reservation is sent beside the thread claim (``shared.runs.admission``), never after it, so admission keeps
its round trips. It reserves an estimate of the run's tokens (the most its first model request may send, the
profile's window cap, plus the profile's output cap) and must fit under every token budget; at the end the
estimate is replaced by what the run used. So under any number of concurrent requests the tokens counted never
exceed a budget by more than what runs used beyond their estimate: a run of one model call never does; a run of
several calls (tools) may cross the budget mid-stream, finishes, and the next run is refused (docs/storage.md,
"Limits and usage", states the bound).

A user's own limits are cached per process with the version they were read at; each reservation's conditional
write checks that version, so an administrator's change applies to the next reservation on every instance.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from shared.errors import ServiceUnavailable, TooManyRequests
from shared.limits.config import LimitsConfig
from shared.limits.metrics import LIMIT_REFUSALS, emit_limit_metric
from shared.limits.models import Refusal, ReserveRequest, RunSpend, ScopeAsk, TokenCounts, UserLimits
from shared.limits.ports import UsageCounters
from shared.limits.windows import SLOT_RETRY_AFTER_S, Windows
from shared.models import Identity, Run, Usage, utc_now
from shared.profiles import ExecutionProfile

logger = logging.getLogger(__name__)

DEFAULT_OUTPUT_ESTIMATE = 4096
"""The output a run is assumed to produce when its profile sets no ``model.max_output_tokens``."""
PROMPT_ALLOWANCE = 4_000
"""Tokens a run's first request is assumed to need besides its window when its reservation is estimated
(``shared.runs.run_estimate``): the worker system prompt with its tool specifications, the memories note, the shared
state and the client's context notes."""
ONE_RUN_TOKENS = PROMPT_ALLOWANCE + DEFAULT_OUTPUT_ESTIMATE
"""The least a chat run of a profile without its own output cap reserves (a new thread's first message): a token
budget below it admits no run, and the admin limits API says so."""
CACHED_USERS = 10_000
"""Users whose own limits a process remembers (each with its version, checked by every reservation)."""


def estimate_tokens(profile: ExecutionProfile) -> int:
    """What a run is reserved at admission: its profile's window cap (input) plus its output cap."""
    return profile.history_policy.max_input_tokens + (profile.model.max_output_tokens or DEFAULT_OUTPUT_ESTIMATE)


def spend_of(usage: Sequence[Usage], executor: str) -> RunSpend:
    """A run's usage as counted: input not read from the provider's cache, cached input and output, by model."""
    tokens: dict[str, TokenCounts] = {}
    for call in usage:
        old = tokens.get(call.model, TokenCounts())
        cached = min(call.cached_input_tokens, call.input_tokens)
        tokens[call.model] = TokenCounts(
            input=old.input + call.input_tokens - cached,
            cached_input=old.cached_input + cached,
            output=old.output + call.output_tokens,
        )
    return RunSpend(executor=executor, tokens=tokens)


class LimitGate:
    """Reserves, settles and releases runs against the counters (the module docstring says how)."""

    def __init__(
        self, counters: UsageCounters, config: LimitsConfig, *, clock: Callable[[], datetime] = utc_now
    ) -> None:
        self.counters = counters
        self.config = config
        self._clock = clock
        self._held: dict[tuple[str, str], ReserveRequest] = {}
        self._user_limits: OrderedDict[tuple[str, str], UserLimits] = OrderedDict()

    def now(self) -> datetime:
        return self._clock()

    async def reserve(self, identity: Identity, run_id: str, *, interactive: bool, estimate: int) -> ReserveRequest:
        """Reserve a run, or raise ``TooManyRequests`` with nothing taken. ``interactive`` (a chat run) takes a
        concurrency slot and counts as a run of the minute; every run reserves its tokens. The reservation is the
        caller's until it ``hold``s it (the run was stored) or ``release``s it."""
        windows = Windows.at(self._clock())
        key = (identity.tenant_id, identity.user_id)
        known = self._user_limits.get(key, UserLimits())
        for _ in range(3):
            request = self._request(identity, run_id, windows, known, interactive=interactive, estimate=estimate)
            outcome = await self.counters.reserve(request)
            if outcome.stale is not None:
                known = outcome.stale
                self._remember(key, known)
                continue
            if outcome.refusal is not None:
                raise self._refused(outcome.refusal, windows, estimate)
            return request
        raise ServiceUnavailable("the limits are being changed; retry shortly", code="service_unavailable")

    def hold(self, request: ReserveRequest) -> None:
        """The reserved run was stored and will run here: its reservation waits for ``settle``."""
        self._held[(request.tenant_id, request.run_id)] = request

    def hand_on(self, tenant_id: str, run_id: str) -> ReserveRequest | None:
        """The run goes on in another invocation (``shared.runs.slices``): its reservation leaves this process with
        it, to be held there (``hold``) and settled once, when the run ends."""
        return self._held.pop((tenant_id, run_id), None)

    def _request(
        self,
        identity: Identity,
        run_id: str,
        windows: Windows,
        known: UserLimits,
        *,
        interactive: bool,
        estimate: int,
    ) -> ReserveRequest:
        tenant_limits = self.config.for_tenant(identity.tenant_id)
        user = ScopeAsk(
            limits=self.config.for_user(identity.tenant_id, known.limits),
            tokens=estimate,
            takes_slot=interactive,
            counts_run=interactive,
        )
        tenant = None
        if tenant_limits.model_dump(exclude_none=True):
            tenant = ScopeAsk(limits=tenant_limits, tokens=estimate, takes_slot=interactive, counts_run=interactive)
        return ReserveRequest(
            tenant_id=identity.tenant_id,
            user_id=identity.user_id,
            run_id=run_id,
            windows=windows,
            user=user,
            user_limits_version=known.version,
            tenant=tenant,
        )

    def _remember(self, key: tuple[str, str], limits: UserLimits) -> None:
        self._user_limits[key] = limits
        self._user_limits.move_to_end(key)
        while len(self._user_limits) > CACHED_USERS:
            self._user_limits.popitem(last=False)

    def _refused(self, refusal: Refusal, windows: Windows, estimate: int) -> TooManyRequests:
        emit_limit_metric(LIMIT_REFUSALS, limit=refusal.kind, scope=refusal.scope)
        details: dict[str, Any] = {
            "kind": refusal.kind,
            "scope": refusal.scope,
            "used": refusal.used,
            "limit": refusal.limit,
        }
        if refusal.kind == "concurrentRuns":
            return TooManyRequests(
                f"{refusal.used} runs are active, the {refusal.scope} limit is {refusal.limit}; retry when one ends",
                code="too_many_runs",
                details=details,
                retry_after_s=SLOT_RETRY_AFTER_S,
            )
        reset = {
            "runsPerMinute": windows.minute_resets_at,
            "tokensPerDay": windows.day_resets_at,
            "tokensPerMonth": windows.month_resets_at,
        }[refusal.kind]
        details["resetAt"] = reset.isoformat().replace("+00:00", "Z")
        message = f"the {refusal.scope} limit {refusal.kind} is reached"
        if refusal.kind != "runsPerMinute":
            remaining = max(refusal.limit - refusal.used, 0)
            details.update(reserve=estimate, needed=estimate, remaining=remaining, runsInFlight=refusal.in_flight)
            message += f": this run needs about {estimate:,} tokens and {remaining:,} remain"
        return TooManyRequests(
            message,
            code="quota_exceeded",
            details=details,
            retry_after_s=windows.seconds_until(reset),
        )

    async def release(self, request: ReserveRequest, *, keep_slot: bool = False) -> None:
        """Give back a reservation whose run will not run here: its admission was refused after it was taken, or
        it was a retry that attached to the run admitted before (``keep_slot``: that run holds the same slot)."""
        if keep_slot:
            request = replace(
                request,
                user=replace(request.user, takes_slot=False),
                tenant=replace(request.tenant, takes_slot=False) if request.tenant is not None else None,
            )
        try:
            await self.counters.release(request)
        except Exception:
            # The slot is freed by the next refusal's check of its holders (no run record: a leaked slot); the
            # tokens stay counted, the safe side.
            logger.exception("could not release a reservation", extra={"run_id": request.run_id})

    async def settle(self, tenant_id: str, run_id: str, usage: Sequence[Usage], executor: str) -> None:
        """Replace the run's reservation by what it used (an empty usage after a failure gives it all back), free
        its slot, record its usage, and log one line with tenant, user and usage (never text)."""
        request = self._held.pop((tenant_id, run_id), None)
        if request is None:
            return
        spend = spend_of(usage, executor)
        logger.info(
            "run usage",
            extra={
                "tenant_id": tenant_id,
                "user_id": request.user_id,
                "run_id": run_id,
                "executor": executor,
                "tokens": {
                    model: {"input": c.input, "cachedInput": c.cached_input, "output": c.output}
                    for model, c in spend.tokens.items()
                },
                "reserved": request.user.tokens,
            },
        )
        try:
            await self.counters.settle(request, spend, windows=Windows.at(self._clock()))
        except Exception:
            logger.exception("could not settle a run's usage", extra={"run_id": run_id})

    async def ended(self, run: Run) -> None:
        """A run whose process stopped was ended (a sweep or a takeover): its slot is freed."""
        await self.release_slot(run.tenant_id, run.user_id, run.run_id)

    async def release_slot(self, tenant_id: str, user_id: str, run_id: str) -> None:
        """Free the slot of a run whose process stopped (the sweep or takeover that ends it)."""
        self._held.pop((tenant_id, run_id), None)
        await self.counters.release_slot(tenant_id, user_id, run_id)
