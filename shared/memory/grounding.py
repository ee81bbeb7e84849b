"""Rules 4 and 5 of the memory gate (:mod:`shared.memory.gate`): a proposal is grounded in what the user said,
and a write is stated as a fact about the user. Both read only the proposal's quote, its cited message ids and
the window of one memory run (:class:`ExtractionScope`); a failed rule raises :class:`ProposalRejected`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from shared.memory.injection import message_is_memory_injection
from shared.memory.junk_rules import judge
from shared.memory.text import quote_appears_in, quote_long_enough
from shared.models import Message, Origin, Role


@dataclass(frozen=True)
class ExtractionScope:
    """What the proposals of one memory run may draw on."""

    tenant_id: str
    user_id: str
    thread_id: str
    run_id: str
    window: tuple[Message, ...]
    """Every thread message the model was shown (context and new)."""
    new_message_ids: frozenset[str]
    """The messages not processed by an earlier extraction: at least one source must be among them."""

    def message(self, message_id: str) -> Message | None:
        return next((m for m in self.window if m.id == message_id), None)


class ProposalRejected(Exception):
    """A proposal the gate refuses: the recorded reason (a stable code), a sentence saying why, and details for
    the audit record."""

    def __init__(self, reason: str, why: str, **details: Any) -> None:
        super().__init__(why)
        self.reason = reason
        self.why = why
        self.details = details


def check_grounding(quote: str, source_ids: Sequence[str], scope: ExtractionScope) -> None:
    """Reject a proposal whose sources are not new user messages of the window, or whose quote is not in them
    (the reason says where the quote was found instead)."""
    cited: list[Message] = []
    for source_id in dict.fromkeys(source_ids):
        message = scope.message(source_id)
        if message is None:
            raise ProposalRejected(
                "source_not_in_window", f"message {source_id!r} is not in this conversation's window"
            )
        if message_is_memory_injection(message):
            raise ProposalRejected(
                "source_is_memory_injection", f"message {source_id} is memory-injected text, never a source"
            )
        if message.role is not Role.USER:
            raise ProposalRejected(
                "source_not_user_message", f"message {source_id} is a {message.role.value} message, not the user's"
            )
        if message.meta.origin is Origin.AUTOMATION:
            raise ProposalRejected(
                "source_not_user_message", f"message {source_id} is an automation prompt, not the user's words"
            )
        cited.append(message)
    if not any(m.id in scope.new_message_ids for m in cited):
        raise ProposalRejected(
            "source_already_processed",
            "every cited message was processed by an earlier extraction; only new messages are sources",
        )
    if not quote_long_enough(quote):
        raise ProposalRejected("evidence_too_short", "the evidence quote is too short to identify the user's words")
    if any(quote_appears_in(quote, m.content) for m in cited):
        return
    elsewhere = [m for m in scope.window if quote_appears_in(quote, m.content)]
    if any(message_is_memory_injection(m) for m in elsewhere):
        raise ProposalRejected(
            "evidence_from_memory_injection", "the quote comes from memory-injected text, not from the user"
        )
    others = sorted({m.role.value for m in elsewhere if m.role is not Role.USER or m.meta.origin is Origin.AUTOMATION})
    if others:
        raise ProposalRejected(
            "evidence_not_from_user",
            f"the quote appears only in {', '.join(others)} message(s), never in what the user wrote",
            found_in_roles=others,
        )
    if elsewhere:
        raise ProposalRejected(
            "evidence_not_in_cited_messages",
            "the quote is in a user message that was not cited: " + ", ".join(m.id for m in elsewhere),
        )
    raise ProposalRejected("evidence_not_found", "the quote appears in no message of the conversation (invented)")


def check_context(quote: str, source_ids: Sequence[str], scope: ExtractionScope) -> None:
    """Reject a write whose quote, read in its sentence, is a hypothetical, a question or about someone else."""
    for source_id in dict.fromkeys(source_ids):
        message = scope.message(source_id)
        if message is None or not quote_appears_in(quote, message.content):
            continue
        finding = judge(message.content, quote)
        if finding is not None:
            raise ProposalRejected(finding.reason, finding.why, context_marker=finding.marker[:40])
        return
