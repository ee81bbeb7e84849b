"""What an executor needs to know about the run it executes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

from shared.context_window import KnownHistory
from shared.llm.types import ToolSpec
from shared.models import ExecutionMeta, Identity, Usage
from shared.profiles import ExecutionProfile


@dataclass(frozen=True, slots=True)
class ResumeDecision:
    """One entry of ``RunAgentInput.resume``: a person's answer to an approval interrupt (shared.executors.approvals).

    ``payload``: the edited arguments of a ``resolved`` call (``None``: run it as the model wrote it)."""

    interrupt_id: str
    status: Literal["resolved", "cancelled"]
    payload: dict[str, Any] | None = None


class RunHeadStart(Protocol):
    """What a run does beside its admission, built for the run as a value (the worker's is
    ``shared.executors.head_start.HeadStart``): the service runs :meth:`read` beside admission's first step, calls
    :meth:`open` between its two steps, and :meth:`discard` when the run is refused or attaches to a stored one."""

    async def read(self) -> None: ...

    def open(self, history: KnownHistory) -> None: ...

    async def discard(self) -> None: ...


@dataclass(frozen=True, slots=True)
class RunContext:
    """Who asked, for which thread and run, with which profile, and what the request declared."""

    identity: Identity
    thread_id: str
    run_id: str
    profile: ExecutionProfile
    meta: ExecutionMeta
    # Front-end tools the client declared in RunAgentInput.tools, checked by intake (never executed by the server;
    # offered only when the profile's tool_policy.frontend_allowlist admits them).
    client_tools: tuple[ToolSpec, ...] = ()
    # Server tools the caller declared (None: every tool the profile allows). Automation tasks set this.
    declared_tools: frozenset[str] | None = None
    # RunAgentInput.context items, passed to the model as a bounded system note.
    context_notes: tuple[str, ...] = ()
    # A short summary of the request for audit records (never the message text itself).
    request_summary: str = ""
    # The text of the newest user message of the request (what the worker ranks memories against); empty when
    # the request carries none (then the worker reads the thread's newest message).
    latest_user_text: str = ""
    # The thread's newest messages as admission left them (chat runs): the first context window is read from here.
    known_history: KnownHistory | None = None
    # RunAgentInput.state as intake bounded it; None when the client sent none (the thread's stored state is used).
    client_state: dict[str, Any] | None = None
    # RunAgentInput.resume: the answers to the thread's open approval interrupts, checked at admission.
    resume: tuple[ResumeDecision, ...] = ()
    # What was done for this run beside its admission (reads, a request sent ahead); None without a head start.
    head_start: RunHeadStart | None = None
    # The message the run's first window ends at when it is not the thread's newest (a regenerate's question:
    # the old answer after it is on another branch now); None: the newest, as for every other run.
    leaf_id: str | None = None
    # RunAgentInput.forwardedProps.webhook, checked at admission (shared.url_safety): stored on the run's record.
    webhook: str | None = None
    # Slices (shared.runs.slices): when this invocation's part of the run ends (epoch seconds; the executor stops
    # between two steps after it); None: the run does not go on elsewhere, it ends at its invocation's deadline.
    slice_ends_at: float | None = None
    # When the run began (epoch seconds; its first slice); None: now. The profile's run_policy.max_run_s counts from it.
    run_started_at: float | None = None
    # The usage of the run's earlier slices: counted with this slice's, once, when the run ends.
    prior_usage: tuple[Usage, ...] = ()
    # Which slice this is (0: the first, in the invocation that admitted the run).
    slice_index: int = 0
