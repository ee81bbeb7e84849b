"""Front-end tool calls waiting for the client's result, and the run that answers them.

When the model calls a front-end tool, the worker stores the assistant message with the ids of those calls in
``flags["frontend_tool_calls"]`` and ends the run: the client runs the tool and starts the next run with a
``role: tool`` message. Nothing else records the pending state, so it cannot drift from the thread: a call is
**pending** when it is a front-end call of the thread's newest assistant message with tool calls, no user message
came after that message, and no result for it is stored.

At admission (after the thread is claimed, before anything is stored), :func:`reconcile_pending_calls` decides what
the new run's messages do to them:

- a tool result whose ``toolCallId`` is pending is its answer (stored once: a re-sent message with a stored id was
  already filtered out by the caller);
- a tool result for anything else is refused with 422, nothing stored: ``unknown_tool_call``,
  ``not_a_frontend_tool_call`` (a server tool's call) or ``tool_call_already_answered``;
- a pending call the run does not answer (the user wrote a new message instead) gets the synthetic ``cancelled``
  result a cancelled run gives its open calls, so the history stays valid for every provider.

Results are stored right after their call, in call order, before the run's user messages.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from shared.errors import InvalidRequest
from shared.models import ExecutionMeta, Message, Role
from shared.run_events.tool_results import FRONTEND_CALLS_FLAG, synthetic_error

LOOKBACK = 50
"""Stored messages searched for the call a tool result names (one store request)."""
SUPERSEDED = "the user sent a new message instead of a result for this tool call"


def _refuse(message: str, call_id: str | None, *, code: str) -> InvalidRequest:
    return InvalidRequest(
        message,
        code=code,
        details=[
            {"loc": ["body", "messages", "toolCallId"], "msg": message, "type": "value_error", "toolCallId": call_id}
        ],
    )


def reconcile_pending_calls(
    fresh: Sequence[Message],
    recent: Sequence[Message],
    *,
    thread_id: str,
    run_id: str,
    meta: ExecutionMeta,
) -> list[Message]:
    """The messages to store for a new run: answers and repairs of pending calls first, then the rest. A pure step:
    ``recent`` is the thread's newest messages, newest first, as admission read them beside its claim.

    Raises:
        InvalidRequest: a tool result that answers no pending call (see the module docstring).
    """
    results = [m for m in fresh if m.role is Role.TOOL]
    others = [m for m in fresh if m.role is not Role.TOOL]
    calls = _CallsOnRecord.of(list(recent))
    answers = calls.answers(results)
    answered = [
        answers[call_id] if call_id in answers else _superseded(call_id, thread_id, run_id=run_id, meta=meta)
        for call_id in calls.pending
    ]
    return [*answered, *others]


class _CallsOnRecord(NamedTuple):
    """The tool calls among the thread's newest messages: which were handed to the client, which have a result,
    and which are pending (the module docstring says when)."""

    handed: dict[str, bool]
    """call id -> handed to the client (a front-end call)"""
    answered: set[str]
    pending: list[str]

    @classmethod
    def of(cls, newest_first: list[Message]) -> _CallsOnRecord:
        handed: dict[str, bool] = {}
        answered: set[str] = set()
        pending: list[str] = []
        for msg in newest_first:
            if msg.role is Role.ASSISTANT:
                frontend = set(msg.flags.get(FRONTEND_CALLS_FLAG) or ())
                handed.update({call.id: call.id in frontend for call in msg.tool_calls})
            elif msg.role is Role.TOOL and msg.tool_call_id:
                answered.add(msg.tool_call_id)
        for msg in newest_first:
            if msg.role is Role.USER:
                break
            if msg.role is Role.ASSISTANT and msg.tool_calls:
                frontend = set(msg.flags.get(FRONTEND_CALLS_FLAG) or ())
                pending = [c.id for c in msg.tool_calls if c.id in frontend and c.id not in answered]
                break
        return cls(handed, answered, pending)

    def answers(self, results: list[Message]) -> dict[str, Message]:
        """The pending call each tool result answers; ``InvalidRequest`` for a result that answers none."""
        answers: dict[str, Message] = {}
        for result in results:
            call_id = result.tool_call_id or ""
            if call_id in self.pending and call_id not in answers:
                answers[call_id] = result
            elif self.handed.get(call_id) is False:
                raise _refuse(
                    f"tool call {call_id!r} is a server tool's call; the client does not answer it",
                    call_id,
                    code="not_a_frontend_tool_call",
                )
            elif call_id in answers or call_id in self.answered or call_id in self.handed:
                raise _refuse(f"tool call {call_id!r} already has a result", call_id, code="tool_call_already_answered")
            else:
                raise _refuse(f"no pending tool call {call_id!r} on this thread", call_id, code="unknown_tool_call")
        return answers


def _superseded(call_id: str, thread_id: str, *, run_id: str, meta: ExecutionMeta) -> Message:
    """The synthetic ``cancelled`` result of a pending call the user answered with a new message instead."""
    return Message(
        id=f"msg_superseded_{call_id}"[:128],
        thread_id=thread_id,
        role=Role.TOOL,
        content=synthetic_error("cancelled", SUPERSEDED),
        tool_call_id=call_id,
        run_id=run_id,
        meta=meta,
        flags={"synthetic": True, "ended_by": "superseded"},
    )
