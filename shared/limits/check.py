"""Which limit a reservation would break, judged on a scope's counters: the one rule the in-memory counters apply
and the DynamoDB adapter uses to explain a refused conditional write."""

from __future__ import annotations

from shared.limits.models import CounterView, Refusal, Scope, ScopeAsk


def first_broken(ask: ScopeAsk, view: CounterView, scope: Scope, run_id: str) -> Refusal | None:
    """The first limit (concurrency, runs per minute, tokens per day, tokens per month) that taking ``ask`` on
    counters ``view`` would break; None when it fits. A run that holds a slot already (a retry of its request)
    takes no other."""
    limits = ask.limits
    others = len(view.active_runs - {run_id})
    slot_needed = ask.takes_slot and run_id not in view.active_runs
    if slot_needed and limits.concurrent_runs is not None and len(view.active_runs) >= limits.concurrent_runs:
        return Refusal("concurrentRuns", scope, len(view.active_runs), limits.concurrent_runs)
    if ask.counts_run and limits.runs_per_minute is not None and view.runs_this_minute >= limits.runs_per_minute:
        return Refusal("runsPerMinute", scope, view.runs_this_minute, limits.runs_per_minute)
    if limits.tokens_per_day is not None and view.day_tokens + ask.tokens > limits.tokens_per_day:
        return Refusal("tokensPerDay", scope, view.day_tokens, limits.tokens_per_day, others)
    if limits.tokens_per_month is not None and view.month_tokens + ask.tokens > limits.tokens_per_month:
        return Refusal("tokensPerMonth", scope, view.month_tokens, limits.tokens_per_month, others)
    return None
