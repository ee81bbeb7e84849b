"""Runs past one invocation: a run executes in slices, each in one invocation, and goes on in the next.

- **Where a slice ends.** Each invocation gives the run a slice that ends ``reserve_s`` before the invocation's
  deadline (room for one more model turn and its tools), or after ``slice_s`` when that is set (tests, and stacks
  that want shorter invocations). The executor looks at it between two steps only (``shared.executors.slicing``):
  a step that is under way finishes first. At the invocation's own deadline a step still under way is stopped and
  the run fails with ``run_deadline``, as before slices.
- **What is saved.** Nothing the run did is held in memory only: each step's messages (the assistant's turn, the
  tool results) are stored as the step ends, and every event is on the run's stream. What the next invocation
  needs besides is the ticket (``SliceTicket``): who asked, the profile, the client's declared tools and context
  notes, the usage so far and the limits' reservation. The run keeps its thread (its lease is renewed by the next
  slice's heartbeat), stays ``running`` in the ledger, and writes no terminal event.
- **How it goes on.** The ticket goes to the run starter (``QueueStarter.continue_run``): on AWS an asynchronous
  invocation of the background-run function (the ticket is the event: Lambda keeps it, retries it, and keeps it
  in the dead-letter queue if it still fails), in ``make dev`` a task of the process. The next slice rebuilds the
  run's context from the ticket, reads the thread as stored, and appends to the same run stream without a second
  ``RUN_STARTED``: a client following the run (its ``POST`` response, or ``GET /runs/{runId}/events`` from its last
  event id) sees one run, its ids increasing, nothing missing and nothing twice.
- **Usage once.** The ticket carries the usage of the earlier slices; the last slice counts it with its own, and
  the run's usage is recorded, limited and reported once, when the run ends.
- **In all.** The profile's ``run_policy.max_run_s`` bounds the whole run: past it the run ends with ``RUN_ERROR``
  ``run_time_limit`` at its next step.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from shared.executors.context import RunContext
from shared.limits.models import ReserveRequest
from shared.llm.types import ToolSpec
from shared.models import ExecutionMeta, Identity, Usage
from shared.profiles import ExecutionProfile

_RESERVATION: TypeAdapter[ReserveRequest] = TypeAdapter(ReserveRequest)

SLICE_RESERVE_S = 180.0
"""A slice ends this long before its invocation's deadline: a model turn and its tool calls fit in it."""


@dataclasses.dataclass(frozen=True, slots=True)
class SlicePolicy:
    """How long a slice is (``RUN_SLICE_S`` / ``RUN_SLICE_RESERVE_S``), and where a saved run goes on."""

    continue_run: Callable[[Mapping[str, Any]], Awaitable[None]]
    """Hands a ticket (its JSON form) to the next invocation; raises when it cannot."""
    slice_s: float | None = None
    reserve_s: float = SLICE_RESERVE_S

    def ends_at(self, deadline: float, now: float | None = None) -> float:
        """When a slice that starts ``now`` in an invocation ending at ``deadline`` ends (epoch seconds)."""
        start = time.time() if now is None else now
        end = deadline - self.reserve_s
        if self.slice_s is not None:
            end = min(end, start + self.slice_s)
        return end


class SliceTicket(BaseModel):
    """What the next slice of a run needs that is not stored with the thread (the module docstring says why)."""

    model_config = ConfigDict(frozen=True)

    tenant_id: str
    user_id: str
    scopes: tuple[str, ...] = ()
    thread_id: str
    run_id: str
    profile: str
    meta: ExecutionMeta
    client_tools: tuple[dict[str, Any], ...] = ()
    context_notes: tuple[str, ...] = ()
    request_summary: str = ""
    latest_user_text: str = ""
    webhook: str | None = None
    run_started_at: float
    slice_index: int = Field(ge=1)
    usage: tuple[Usage, ...] = ()
    reservation: dict[str, Any] | None = None

    @classmethod
    def of(cls, ctx: RunContext, usage: list[Usage], reservation: ReserveRequest | None) -> SliceTicket:
        """The ticket of ``ctx``'s next slice, with the run's usage so far and its limits' reservation."""
        return cls(
            tenant_id=ctx.identity.tenant_id,
            user_id=ctx.identity.user_id,
            scopes=tuple(sorted(ctx.identity.scopes)),
            thread_id=ctx.thread_id,
            run_id=ctx.run_id,
            profile=ctx.profile.name,
            meta=ctx.meta,
            client_tools=tuple(dataclasses.asdict(t) for t in ctx.client_tools),
            context_notes=ctx.context_notes,
            request_summary=ctx.request_summary,
            latest_user_text=ctx.latest_user_text,
            webhook=ctx.webhook,
            run_started_at=ctx.run_started_at or time.time(),
            slice_index=ctx.slice_index + 1,
            usage=tuple(usage),
            reservation=_RESERVATION.dump_python(reservation, mode="json") if reservation is not None else None,
        )

    def context(self, profile: ExecutionProfile) -> RunContext:
        """The run's context for its next slice (its history is read from the store, as a later turn's is)."""
        return RunContext(
            identity=Identity(tenant_id=self.tenant_id, user_id=self.user_id, scopes=frozenset(self.scopes)),
            thread_id=self.thread_id,
            run_id=self.run_id,
            profile=profile,
            meta=self.meta,
            client_tools=tuple(ToolSpec(**t) for t in self.client_tools),
            context_notes=self.context_notes,
            request_summary=self.request_summary,
            latest_user_text=self.latest_user_text,
            webhook=self.webhook,
            run_started_at=self.run_started_at,
            prior_usage=self.usage,
            slice_index=self.slice_index,
        )

    def limits_reservation(self) -> ReserveRequest | None:
        """The reservation the run's admission made, to settle when the run ends (wherever that is)."""
        return _RESERVATION.validate_python(self.reservation) if self.reservation is not None else None
