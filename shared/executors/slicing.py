"""Where a run may stop between two steps: its profile's time limit, and the end of its slice (``shared.runs.slices``
says what a slice is and how the run goes on)."""

from __future__ import annotations

from shared.errors import AgentError
from shared.executors.context import RunContext
from shared.run_results import ExecutionResult

RUN_TIME_LIMIT = "run_time_limit"


def step_boundary(ctx: RunContext, result: ExecutionResult, now: float) -> bool:
    """Called before each model turn (epoch seconds ``now``). Raises ``run_time_limit`` once the run has taken its
    profile's ``run_policy.max_run_s`` in all; True (``result.suspended`` set) when the slice has ended and the run
    made progress in it (a turn), so the executor stops here and the run goes on in a new invocation."""
    if ctx.run_started_at is not None and now - ctx.run_started_at >= ctx.profile.run_policy.max_run_s:
        raise AgentError("the run reached the longest time its profile allows", code=RUN_TIME_LIMIT)
    if ctx.slice_ends_at is not None and result.model_turns > 0 and now >= ctx.slice_ends_at:
        result.suspended = True
        return True
    return False
