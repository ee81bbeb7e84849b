"""The root span of a run, ``invoke_agent {profile}``, and the links of memory and automation runs.

A run's span starts when its admission starts (``RunService.admit``) and ends just before its terminal event
(``Settlement.settle``): after that event the response ends and Lambda may freeze the environment, so nothing of the
run may still be open. While admission runs it is the current span, and the run's tasks (started inside it) keep it
as theirs: every span of the run (admission, the window and memory reads, each model turn and tool call, settle)
nests under it, and under the HTTP request span that admitted it.

A chat run is a child of the request (and so of the client's ``traceparent``). A run with ``origin: automation`` (a
memory run, a scheduled task) starts a trace of its own and links to the worker runs whose messages it reads: each
stored message that a traced run admitted carries that run's ``traceparent`` in its flags (``message_flags``), so
the memory run finds the runs to link in the messages it reads anyway, with no read of its own.

No user id: traces leave for other systems (a vendor's backend, its retention), where a user's erasure
(``shared/erasure.py``) cannot follow, and a hash of a guessable id is a pseudonym, not an anonymisation. The run id
leads to the run record, and to its user, for those who may read it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Protocol

from shared.models import Message, Usage
from shared.tracing.api import NO_SPAN, Span, error_type, tracer

TRACE_FLAG = "trace"
"""The message flag that holds the ``traceparent`` of the run that stored the message."""


class _Named(Protocol):
    @property
    def name(self) -> str: ...


class _Valued(Protocol):
    @property
    def value(self) -> str: ...


class _Identity(Protocol):
    @property
    def tenant_id(self) -> str: ...


class _Meta(Protocol):
    @property
    def executor(self) -> _Valued: ...

    @property
    def origin(self) -> _Valued: ...


class _Profile(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def model(self) -> _Named: ...


class RunFacts(Protocol):
    """What the span of a run says about it (a ``RunContext`` has all of it)."""

    @property
    def run_id(self) -> str: ...

    @property
    def thread_id(self) -> str: ...

    @property
    def identity(self) -> _Identity: ...

    @property
    def profile(self) -> _Profile: ...

    @property
    def meta(self) -> _Meta: ...


def usage_attributes(usages: Sequence[Usage]) -> dict[str, int]:
    """The GenAI usage attributes of one or more model calls, summed."""
    return {
        "gen_ai.usage.input_tokens": sum(u.input_tokens for u in usages),
        "gen_ai.usage.output_tokens": sum(u.output_tokens for u in usages),
        "gen_ai.usage.cache_read.input_tokens": sum(u.cached_input_tokens for u in usages),
        "gen_ai.usage.reasoning.output_tokens": sum(u.reasoning_tokens for u in usages),
    }


class RunTrace:
    """The span of one run: started by ``begin_run``, current in the run's tasks, ended once."""

    def __init__(self, span: Span, *, root: bool) -> None:
        self.span = span
        self.root = root
        self._linked: set[str] = set()

    @contextmanager
    def active(self) -> Iterator[None]:
        """The run's span current (and this the run of the context) inside the block, and in the tasks started
        there."""
        token = _RUN.set(self)
        try:
            with tracer().activate(self.span):
                yield
        finally:
            _RUN.reset(token)

    def message_flags(self) -> dict[str, str]:
        """The flags each message the run admits carries: the run's ``traceparent`` (the memory run links to it);
        none when the run is not traced. A value, not a transform: the run service sets them on the messages it
        admits, so the messages go down to admission without coming back up from here."""
        parent = self.span.traceparent
        return {} if parent is None else {TRACE_FLAG: parent}

    def attached(self) -> None:
        """A retry of a run admitted before: this request attached to it and started nothing."""
        self.span.set("agent.run.outcome", "attached")
        self.span.end()

    def refused(self, exc: BaseException) -> None:
        """Admission refused the run (busy thread, conflicting body, the store or stream down)."""
        self.span.set("agent.run.outcome", "refused")
        self.span.fail(error_type(exc))
        self.span.end()

    def finish(self, status: str, error_code: str | None, usages: Sequence[Usage]) -> None:
        """The run's outcome (the ledger's status) and its total usage; ends the span."""
        self.span.set("agent.run.outcome", status)
        for key, value in usage_attributes(usages).items():
            self.span.set(key, value)
        if error_code:
            self.span.fail(error_code)
        self.span.end()

    def link(self, messages: Sequence[Message]) -> None:
        """Links to the runs that stored ``messages`` (an automation run's reads); once per run."""
        own = self.span.traceparent
        for message in messages:
            parent = message.flags.get(TRACE_FLAG)
            if not isinstance(parent, str) or parent in self._linked or parent == own:
                continue
            self._linked.add(parent)
            self.span.link(parent, {"agent.run.id": message.run_id, "agent.link.reason": "read_messages"})


_NO_RUN = RunTrace(NO_SPAN, root=False)
_RUN: ContextVar[RunTrace] = ContextVar("agent_run_trace", default=_NO_RUN)


def begin_run(ctx: RunFacts) -> RunTrace:
    """The span of a run about to be admitted: under the current span (the HTTP request), or a trace of its own
    for a run without a user typing (``origin: automation``)."""
    current = tracer()
    if not current.enabled:
        return _NO_RUN
    root = ctx.meta.origin.value == "automation"
    attributes = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": ctx.profile.name,
        "gen_ai.conversation.id": ctx.thread_id,
        "gen_ai.request.model": ctx.profile.model.name,
        "agent.run.id": ctx.run_id,
        "agent.profile": ctx.profile.name,
        "agent.executor": ctx.meta.executor.value,
        "agent.origin": ctx.meta.origin.value,
        "agent.tenant.id": ctx.identity.tenant_id,
    }
    return RunTrace(current.start(f"invoke_agent {ctx.profile.name}", attributes, root=root), root=root)


def current_run() -> RunTrace:
    """The run of the current context (a no-op one outside a run, or with tracing off)."""
    return _RUN.get()


def finish_run(status: str, error_code: str | None, usages: Sequence[Usage]) -> None:
    """End the current run's span with its outcome: called just before the terminal event."""
    current_run().finish(status, error_code, usages)


def link_read_messages(messages: Sequence[Message]) -> None:
    """An automation run (memory, schedule) links to the runs whose messages it read; a chat run does not (its
    history is its own thread's past, already in its parent's context)."""
    run = current_run()
    if run.root:
        run.link(messages)
