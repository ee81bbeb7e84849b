"""Limits on what a user and a tenant may spend: concurrent runs, runs per minute, tokens per day and month.

- ``config``: the deployment's limits (``LIMITS``) and a tenant administrator's per-user limits, validated.
- ``windows``: the UTC windows the counters count in, and when each resets.
- ``gate``: ``LimitGate``, what the run path asks: reserve at admission (beside the thread claim), settle at the
  end of the run, release a run that never ran; its refusals are 429 errors (``quota_exceeded``,
  ``too_many_runs``).
- ``usage``: the usage views (a caller's day and month, a tenant's month per user) and their estimated cost.

The counters themselves sit behind the ``UsageCounters`` port (``shared.limits.ports``): DynamoDB conditional
updates in production (docs/storage.md, "Limits and usage"), an in-memory fake in tests.
"""
