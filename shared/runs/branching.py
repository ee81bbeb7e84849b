"""Edit, regenerate and retry: what a chat request asks of the thread's tree, by explicit rules, never by a guess
(docs/protocols/agent/run-agent-input.md §3.3).

- **Regenerate** (``forwardedProps.regenerate: true``): the request's current message (its last user message) is
  stored already; the run answers it again. Its answer becomes a sibling of the old one and the current branch; the
  model sees the branch up to the question, never the old answer (``RunContext.leaf_id``).
- **Edit** (``forwardedProps.parentMessageId``: a message id of the thread, or ``null`` for the start): the
  request's current message is new, and is stored as a child of that message, a sibling of whatever followed it.
  The run answers it on the new branch.
- **A stored id with other text** is refused, ``409 message_edit_conflict``, saying how to edit: never a silent drop.
- **A retry** (a request that brings nothing new: no new user or tool message, no ``resume``, no ``state``, neither
  a regenerate nor an edit) calls no model and charges nothing: ``409 run_exists`` naming the run that answered it.

Pure functions; admission and the run service call them between the claim and the store.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from shared.errors import Conflict, InvalidRequest
from shared.executors.context import RunContext
from shared.models import PREVIOUS, AuditRecord, Identity, Message, Role, Run
from shared.ports import RunLedger

_PARENT_KEY = "parentMessageId"
_REGENERATE_KEY = "regenerate"


@dataclass(frozen=True, slots=True)
class BranchRequest:
    """What ``forwardedProps`` asks of the tree: nothing, a regenerate, or an edit under ``parent_id``."""

    regenerate: bool = False
    edit: bool = False
    parent_id: str | None = None
    """With ``edit``: the message the edited one follows (None: it starts the thread)."""


def _invalid(field: str, message: str) -> InvalidRequest:
    return InvalidRequest(
        message,
        details=[{"loc": ["body", "forwardedProps", field], "msg": message, "type": "value_error"}],
    )


def branch_request(forwarded_props: Any) -> BranchRequest:
    """Read ``forwardedProps.regenerate`` and ``forwardedProps.parentMessageId`` (``422 invalid_request`` naming the
    field for a bad value, or for both at once)."""
    if not isinstance(forwarded_props, dict):
        return BranchRequest()
    regenerate = forwarded_props.get(_REGENERATE_KEY, False)
    if not isinstance(regenerate, bool):
        raise _invalid(_REGENERATE_KEY, "regenerate must be true or false")
    if _PARENT_KEY not in forwarded_props:
        return BranchRequest(regenerate=regenerate)
    parent = forwarded_props[_PARENT_KEY]
    if parent is not None and not (isinstance(parent, str) and _is_id(parent)):
        raise _invalid(_PARENT_KEY, "parentMessageId must be a message id of the thread, or null")
    if regenerate:
        raise _invalid(_PARENT_KEY, "send either regenerate or parentMessageId, not both")
    return BranchRequest(edit=True, parent_id=parent)


def _is_id(value: str) -> bool:
    return 0 < len(value) <= 128 and value[0].isalnum()


def current_message(messages: Sequence[Message]) -> Message | None:
    """The request's current message: its last user message."""
    users = [m for m in messages if m.role is Role.USER]
    return users[-1] if users else None


def with_branch(messages: Sequence[Message], branch: BranchRequest) -> tuple[list[Message], str | None]:
    """The request's messages as the tree takes them, and the leaf its run's first window ends at (a regenerate's
    question; None: the newest message). An edit's current message gets its parent; a regenerate needs a current
    message (``422``)."""
    current = current_message(messages)
    if branch.regenerate:
        if current is None:
            raise _invalid(_REGENERATE_KEY, "a regenerate needs the user message to answer again in messages")
        return list(messages), current.id
    if branch.edit:
        if current is None:
            raise _invalid(_PARENT_KEY, "an edit needs the edited user message in messages")
        edited = {"parent_id": branch.parent_id, "flags": {**current.flags, "edit": True}}
        return [m.model_copy(update=edited) if m is current else m for m in messages], None
    return list(messages), None


def referenced_ids(messages: Sequence[Message], leaf_id: str | None) -> list[str]:
    """The stored ids a request leans on besides its own messages: an edit's parent, a regenerate's question."""
    ids = [m.parent_id for m in messages if m.parent_id not in (None, PREVIOUS)]
    return [i for i in ids if i is not None] + ([leaf_id] if leaf_id is not None else [])


def check_referenced(messages: Sequence[Message], leaf_id: str | None, known: set[str]) -> None:
    """``422`` when an edit's parent, or a regenerate's question, is not a message of the thread."""
    for msg in messages:
        if msg.parent_id not in (None, PREVIOUS) and msg.parent_id not in known:
            raise _invalid(_PARENT_KEY, "parentMessageId is not a message of this thread")
    if leaf_id is not None and leaf_id not in known:
        raise _invalid(_REGENERATE_KEY, "the message to answer again is not a message of this thread")


def check_no_silent_edit(messages: Sequence[Message], recent: Sequence[Message]) -> None:
    """``409 message_edit_conflict`` when the request carries a stored user message's id with other text: the
    stored version is never changed, and the new text is never dropped without a word."""
    stored = {m.id: m for m in recent if m.role is Role.USER}
    for msg in messages:
        old = stored.get(msg.id)
        if msg.role is Role.USER and old is not None and old.content != msg.content:
            raise Conflict(
                f"message {msg.id!r} is stored with other text; a stored message is never changed. To edit it, send "
                "the new text as a new message (a new id) with forwardedProps.parentMessageId set to the id of the "
                "message before it (null for the first message)",
                code="message_edit_conflict",
                details={"messageId": msg.id, "parentMessageId": old.parent_id if old.parent_id != PREVIOUS else None},
            )


def asks_more(messages: Sequence[Message], *, resume: bool, state: bool, leaf_id: str | None) -> bool:
    """Whether a request asks for more than its messages: a ``resume``, a ``state``, a regenerate or an edit."""
    return resume or state or leaf_id is not None or any(m.parent_id != PREVIOUS for m in messages)


def retried_run(ctx: RunContext, messages: Sequence[Message], known: set[str], recent: Sequence[Message]) -> str | None:
    """For a request that brings nothing new (every message stored, nothing more asked): the run that stored its
    current message (found among ``recent``), which a retry attaches to while it runs; None otherwise."""
    more = asks_more(messages, resume=bool(ctx.resume), state=ctx.client_state is not None, leaf_id=ctx.leaf_id)
    if more or not messages or any(m.id not in known for m in messages):
        return None
    current = current_message(messages) or messages[-1]
    return next((m.run_id for m in recent if m.id == current.id), None)


async def running_run(runs: RunLedger, ctx: RunContext, run_id: str | None) -> Run | None:
    """The caller's run ``run_id`` on ``ctx``'s thread while it runs (a retry under a new ``runId`` follows it)."""
    run = await runs.get_run(ctx.identity.tenant_id, run_id) if run_id else None
    mine = run is not None and (run.user_id, run.thread_id) == (ctx.identity.user_id, ctx.thread_id)
    return run if mine and run is not None and not run.status.is_terminal else None


def check_brings_something(
    fresh: Sequence[Message], messages: Sequence[Message], recent: Sequence[Message], *, asks_more: bool
) -> None:
    """``409 run_exists`` for a request that brings nothing new (``fresh``: its messages the thread lacks;
    ``asks_more``: it resumes, sends a state, regenerates or edits): no model is called, nothing is charged. The
    error names the run that stored its current message, whose answer the client can read."""
    if fresh or asks_more:
        return
    current = current_message(messages) or (messages[-1] if messages else None)
    stored = next((m for m in recent if current is not None and m.id == current.id), None)
    run_id = stored.run_id if stored is not None else None
    raise Conflict(
        "this request brings nothing new: its messages are stored and were answered"
        + (f" by run {run_id!r}" if run_id else "")
        + "; to retry the same run reuse its runId, to answer again send forwardedProps.regenerate: true",
        code="run_exists",
        details={"runId": run_id} if run_id else None,
    )


def branch_audit(
    identity: Identity, thread_id: str, run_id: str, stored: Sequence[Message], leaf_id: str | None
) -> list[AuditRecord]:
    """The audit records of an admitted run that edits (a stored message with its own parent) or regenerates
    (``leaf_id``): who, which ids; the record's time is when."""
    records: list[AuditRecord] = []

    def record(kind: str, details: dict[str, Any]) -> None:
        records.append(
            AuditRecord(
                kind=kind,
                tenant_id=identity.tenant_id,
                thread_id=thread_id,
                run_id=run_id,
                user_id=identity.user_id,
                details=details,
            )
        )

    for msg in stored:
        if msg.role is Role.USER and msg.flags.get("edit"):
            record("message_edited", {"message_id": msg.id, "parent_id": msg.parent_id})
    if leaf_id is not None:
        record("answer_regenerated", {"message_id": leaf_id})
    return records
