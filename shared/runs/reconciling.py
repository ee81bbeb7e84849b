"""Reconciling a chat run's new messages with its thread: a pure step between admission's claim and its store.

Admission's first step (``Admitter.claim``) returns the caller's new messages and the thread's newest messages read
beside the claim; :func:`reconcile_with_thread` turns them into the messages to store, which the second step
(``Admitter.store``) stores. It reads nothing and writes nothing:

- front-end tool results are checked against the thread's pending calls, and pending calls the run does not answer
  get their synthetic results (``shared.runs.pending_calls``);
- the run's ``resume`` is checked against the thread's open approval interrupts, and declined, expired and
  superseded approval calls get theirs (``shared.runs.approvals``).

An ``AgentError`` it raises refuses the run with nothing stored (the caller hands it to ``Admitter.refuse``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from shared.errors import InvalidRequest
from shared.executors.context import RunContext
from shared.models import Message, Role
from shared.runs.approvals import reconcile_approvals
from shared.runs.branching import asks_more, check_brings_something, check_no_silent_edit
from shared.runs.pending_calls import reconcile_pending_calls


def reconcile_with_thread(
    ctx: RunContext, fresh: Sequence[Message], recent: Sequence[Message], *, now: datetime
) -> list[Message]:
    """The messages to store for ``ctx``'s run: ``fresh`` (the caller's messages the thread does not have yet)
    reconciled with ``recent`` (the thread's newest messages, newest first)."""
    reconciled = reconcile_pending_calls(fresh, recent, thread_id=ctx.thread_id, run_id=ctx.run_id, meta=ctx.meta)
    return reconcile_approvals(
        ctx.resume, reconciled, recent, now=now, thread_id=ctx.thread_id, run_id=ctx.run_id, meta=ctx.meta
    )


def check_new_input(
    ctx: RunContext, messages: Sequence[Message], fresh: Sequence[Message], recent: Sequence[Message]
) -> None:
    """Before anything is stored: a stored user message re-sent with other text is ``409 message_edit_conflict``,
    and a request that brings nothing new is ``409 run_exists`` (``shared.runs.branching``): no model is called
    for it, and nothing is charged."""
    check_no_silent_edit(messages, recent)
    if ctx.leaf_id is not None and any(m.role is Role.USER for m in fresh):
        raise InvalidRequest(
            "a regenerate answers a stored message again: send no new user message with it",
            details=[
                {"loc": ["body", "forwardedProps", "regenerate"], "msg": "new user message", "type": "value_error"}
            ],
        )
    more = asks_more(messages, resume=bool(ctx.resume), state=ctx.client_state is not None, leaf_id=ctx.leaf_id)
    check_brings_something(fresh, messages, recent, asks_more=more)
