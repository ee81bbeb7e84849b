"""What a chat run reserves when its profile's worst case does not fit its budget: its real first request's
estimate plus its output cap (docs/storage.md, "The bound").

Admission first asks for the worst case (the profile's window cap plus its output cap: 28,096 tokens on the default
profile) beside the claim, which costs no round trip. A user with less left than that (a small daily budget) would
be refused on a first message of 20 tokens, so a token reservation refused while none of the user's other runs is
in flight is asked again, once, at what the run can actually send: the context window as admission's read of the
thread's newest messages shows it (the window the run's first request holds, ``shared.context_window``), plus
:data:`PROMPT_ALLOWANCE` for what the window does not hold (system prompt, tool specifications, memories, notes),
plus the output cap. A window that reaches past what admission read is estimated at the cap. The bound stays: the
count never exceeds the budget by more than one run's use beyond its reservation.
"""

from __future__ import annotations

from collections.abc import Sequence

from shared.context_window import KnownHistory, resolve_window
from shared.errors import AgentError
from shared.executors.context import RunContext
from shared.limits.gate import PROMPT_ALLOWANCE, estimate_tokens
from shared.message_tree import link_messages
from shared.models import Message, ThreadClaim, utc_now
from shared.tokens import message_counter_for


def refused_for_tokens(outcome: object) -> bool:
    """A reservation refused for a token budget (not for a slot or the runs of the minute) while no other run of
    the scope is in flight: only then is it asked again at the real estimate. Runs in flight reserved the worst case
    each, so a burst of concurrent requests is judged as before, and never overshoots by more than it did."""
    return (
        isinstance(outcome, AgentError)
        and outcome.code == "quota_exceeded"
        and isinstance(outcome.details, dict)
        and outcome.details.get("kind") in {"tokensPerDay", "tokensPerMonth"}
        and outcome.details.get("runsInFlight") == 0
    )


class _Beyond(Exception):
    """The window reaches past what admission read."""


class _KnownOnly:
    """A history reader that answers only from what admission read and stored."""

    def __init__(self, known: KnownHistory) -> None:
        self._known = known

    async def read_back(self, tenant_id: str, thread_id: str, *, before_seq: int | None, limit: int) -> list[Message]:
        page = self._known.page(before_seq, limit)
        if page is None:
            raise _Beyond
        return page


async def first_request_estimate(
    ctx: RunContext, claimed: ThreadClaim, recent: Sequence[Message], fresh: Sequence[Message], *, read_limit: int
) -> int:
    """The tokens ``ctx``'s run is reserved at when its worst case does not fit: its first request's window
    (``recent``: the thread's newest messages, newest first; ``fresh``: what admission stores) plus the allowance,
    at most the window cap, plus the output cap."""
    worst = estimate_tokens(ctx.profile)
    policy = ctx.profile.history_policy
    output = worst - policy.max_input_tokens
    linked = link_messages(fresh, leaf_id=claimed.leaf_id, last_seq=claimed.last_seq)
    stored = [m.model_copy(update={"seq": claimed.last_seq + i}) for i, m in enumerate(linked, start=1)]
    known = KnownHistory.after_admission(recent, read_limit=read_limit, last_seq=claimed.last_seq, stored=stored)
    if known is None:
        return worst
    try:
        window = await resolve_window(
            _KnownOnly(known),
            ctx.identity.tenant_id,
            ctx.thread_id,
            policy,
            now=utc_now(),
            count_tokens=message_counter_for(ctx.profile.model.name),
            leaf_id=ctx.leaf_id,
        )
    except _Beyond:
        return worst
    return min(window.input_tokens + PROMPT_ALLOWANCE, policy.max_input_tokens) + output
