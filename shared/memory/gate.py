"""The memory quality gate: deterministic rules applied to every proposal after the model, before the store.

The model proposes; the gate decides. A proposal is persisted only when all of these hold, checked in order
(the first failure is the recorded reason):

1. **Well-formed**: the arguments validate against the tool's schema (:mod:`shared.memory.models`).
2. **Confident enough**: ``confidence >= threshold`` (the profile's parameter, ``MEMORY_CONFIDENCE_THRESHOLD``).
   Below it the proposal is recorded, never persisted.
3. **A forget (or a ``supersedes``) names an active memory of the same user.** Another user's id, an unknown id
   and an already inactive memory are refused alike.
4. **Grounded in what the user said**: every cited ``source_message_ids`` entry is a *user* message of the
   window, written by the human (not an automation prompt), not memory-injected text; at least one of them is
   new (not processed by an earlier extraction); and the ``evidence_quote`` appears in a cited message
   (compared letters-and-digits only, case-folded; ``...`` may join fragments that appear in order). When it
   does not, the reason says where the quote was found instead (an assistant, tool or system message, the
   memory injection) or that it was found nowhere (invented).
5. **Stated as a fact about the user** (writes): the sentence around the quote in the cited message is not a
   hypothetical, a question or about a third party (:mod:`shared.memory.junk_rules`).
6. **Not a duplicate** (writes): a proposal whose text equals, or nearly equals
   (:func:`shared.memory.text.near_duplicate`), an active memory, or says the same in other words or another
   language (cosine similarity of :mod:`shared.memory.embeddings` vectors at least the embedder's
   ``duplicate_similarity``, same numbers), is merged into it (source ids added, confidence raised to the higher
   one, ``merge_count`` + 1) instead of added.

A forget marks the memory ``retracted`` or ``superseded`` with reason and provenance, never deletes it. Every
decision, accepted or not, becomes an :class:`~shared.models.AuditRecord` of kind ``memory_decision`` saying why.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, TypeVar

from pydantic import ValidationError

from shared.executors.model_turn import new_id
from shared.memory.embeddings import LexiconEmbedder, cosine
from shared.memory.grounding import ExtractionScope, ProposalRejected, check_context, check_grounding
from shared.memory.models import MAX_KEPT_SOURCE_IDS, Deactivation, ForgetProposal, Memory, MemoryStatus, WriteProposal
from shared.memory.ports import Embedder, MemoryStore
from shared.memory.text import (
    NEAR_DUPLICATE_JACCARD,
    compact,
    near_duplicate,
    numbers,
)
from shared.memory.tools import MEMORY_FORGET, MEMORY_WRITE
from shared.models import AuditRecord, digest, utc_now
from shared.ports import AuditLog

AUDIT_KIND = "memory_decision"
logger = logging.getLogger(__name__)

_P = TypeVar("_P", WriteProposal, ForgetProposal)

Decision = Literal["stored", "merged", "superseded", "retracted", "rejected"]


@dataclass(frozen=True)
class GateOutcome:
    tool_name: str
    decision: Decision
    reason: str
    """A stable code: ``stored``, ``exact_duplicate``, ``evidence_not_found``, ..."""
    why: str
    """One sentence a person can read in the audit trail."""
    memory_id: str | None = None
    """The memory written, merged into, or deactivated."""
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def persisted(self) -> bool:
        return self.decision != "rejected"

    def tool_result(self) -> str:
        """What the model sees as the tool's result."""
        body: dict[str, Any] = {"status": self.decision, "reason": self.reason, "message": self.why}
        if self.memory_id is not None:
            body["memory_id"] = self.memory_id
        return json.dumps(body, ensure_ascii=False)


@dataclass(frozen=True)
class _Duplicate:
    """An active memory a write proposal repeats, how similar the two are, and the recorded reason."""

    memory: Memory
    score: float
    reason: str


class MemoryGate:
    def __init__(
        self,
        store: MemoryStore,
        audit: AuditLog,
        *,
        confidence_threshold: float,
        near_duplicate_threshold: float = NEAR_DUPLICATE_JACCARD,
        clock: Callable[[], datetime] = utc_now,
        new_memory_id: Callable[[], str] = lambda: new_id("mem"),
        embedder: Embedder | None = None,
    ) -> None:
        self._store = store
        self._audit = audit
        self.confidence_threshold = confidence_threshold
        self._near = near_duplicate_threshold
        self._clock = clock
        self._new_id = new_memory_id
        self._embedder: Embedder = embedder or LexiconEmbedder()

    @property
    def embedder(self) -> Embedder:
        return self._embedder

    async def review(self, tool_name: str, arguments: str, scope: ExtractionScope) -> GateOutcome:
        """Judge one proposal, apply it when accepted, record the decision, and return it."""
        summary: dict[str, Any] = {}
        try:
            if tool_name == MEMORY_WRITE:
                write = _parse(WriteProposal, arguments)
                summary = _summary(write)
                outcome = await self._write(write, scope)
            elif tool_name == MEMORY_FORGET:
                forget = _parse(ForgetProposal, arguments)
                summary = _summary(forget)
                outcome = await self._forget(forget, scope)
            else:
                raise ProposalRejected("not_a_memory_tool", f"{tool_name!r} is not a memory tool")
        except ProposalRejected as rejected:
            outcome = GateOutcome(tool_name, "rejected", rejected.reason, rejected.why, details=rejected.details)
        await self._audit.record(
            AuditRecord(
                kind=AUDIT_KIND,
                tenant_id=scope.tenant_id,
                thread_id=scope.thread_id,
                run_id=scope.run_id,
                user_id=scope.user_id,
                at=self._clock(),
                details={
                    "tool_name": tool_name,
                    "decision": outcome.decision,
                    "reason": outcome.reason,
                    "why": outcome.why,
                    "memory_id": outcome.memory_id,
                    "confidence_threshold": self.confidence_threshold,
                    "arguments_digest": digest(arguments),
                    **summary,
                    **outcome.details,
                },
            )
        )
        return outcome

    # ---- memory_write --------------------------------------------------------------------------------------

    async def _write(self, proposal: WriteProposal, scope: ExtractionScope) -> GateOutcome:
        self._check_confidence(proposal.confidence)
        if not proposal.content.strip():
            raise ProposalRejected("content_empty", "the memory text is empty")
        target: Memory | None = None
        if proposal.supersedes is not None:
            target = await self._active_target(scope, proposal.supersedes)
        check_grounding(proposal.evidence_quote, proposal.source_message_ids, scope)
        check_context(proposal.evidence_quote, proposal.source_message_ids, scope)
        now = self._clock()
        candidates = [
            m
            for m in await self._store.list_memories(scope.tenant_id, scope.user_id)
            if target is None or m.id != target.id
        ]
        duplicate = await self._duplicate_of(proposal.content, candidates)
        if duplicate is not None:
            return await self._merge(duplicate, proposal, target, scope, now)
        return await self._store_new(proposal, target, scope, now)

    async def _duplicate_of(self, content: str, candidates: Sequence[Memory]) -> _Duplicate | None:
        """The first candidate that says what ``content`` says: (nearly) the same text, or the same meaning with
        the same numbers."""
        semantic = await self._semantic_scores(content, candidates)
        for existing, meaning in zip(candidates, semantic, strict=True):
            same, score = near_duplicate(content, existing.content, threshold=self._near)
            by_meaning = (
                not same
                and meaning >= self._embedder.duplicate_similarity
                and numbers(content) == numbers(existing.content)
            )
            if not same and not by_meaning:
                continue
            if by_meaning:
                score = meaning
            exact = compact(content) == compact(existing.content)
            reason = "exact_duplicate" if exact else "semantic_duplicate" if by_meaning else "near_duplicate"
            return _Duplicate(existing, score, reason)
        return None

    async def _merge(
        self,
        duplicate: _Duplicate,
        proposal: WriteProposal,
        target: Memory | None,
        scope: ExtractionScope,
        now: datetime,
    ) -> GateOutcome:
        """Fold ``proposal`` into the memory that already says it (and supersede ``target`` with that one)."""
        existing, score = duplicate.memory, duplicate.score
        merged = existing.model_copy(
            update={
                "source_message_ids": _merge_ids(existing.source_message_ids, proposal.source_message_ids),
                "confidence": max(existing.confidence, proposal.confidence),
                "merge_count": existing.merge_count + 1,
                "updated_at": now,
            }
        )
        await self._store.put(merged)
        if target is not None:
            await self._supersede(target, merged.id, proposal, scope)
        return GateOutcome(
            MEMORY_WRITE,
            "merged",
            duplicate.reason,
            f"the same fact is already remembered as {existing.id} (similarity {score:.2f}); merged, not added",
            memory_id=existing.id,
            details={"duplicate_of": existing.id, "similarity": round(score, 3), "embedder": self._embedder.model},
        )

    async def _store_new(
        self, proposal: WriteProposal, target: Memory | None, scope: ExtractionScope, now: datetime
    ) -> GateOutcome:
        """Store ``proposal`` as a new memory (superseding ``target`` when it names one)."""
        memory = Memory(
            id=self._new_id(),
            tenant_id=scope.tenant_id,
            user_id=scope.user_id,
            kind=proposal.kind,
            content=" ".join(proposal.content.split()),
            confidence=proposal.confidence,
            evidence_quote=proposal.evidence_quote,
            source_message_ids=tuple(dict.fromkeys(proposal.source_message_ids)),
            run_id=scope.run_id,
            thread_id=scope.thread_id,
            created_at=now,
            updated_at=now,
        )
        await self._store.put(memory)
        details: dict[str, Any] = {}
        why = "grounded in the user's own words and new"
        if target is not None:
            await self._supersede(target, memory.id, proposal, scope)
            details["superseded_memory_id"] = target.id
            why += f"; supersedes {target.id}"
        return GateOutcome(MEMORY_WRITE, "stored", "stored", why, memory_id=memory.id, details=details)

    async def _semantic_scores(self, content: str, candidates: Sequence[Memory]) -> list[float]:
        """Cosine similarity of ``content`` to each candidate; zeros (lexical rules only) when embedding fails."""
        if not candidates:
            return []
        try:
            vectors = await self._embedder.embed([content, *(m.content for m in candidates)])
        except Exception as exc:  # an embeddings outage must not fail the memory run: fall back to lexical rules
            logger.warning(
                "embedding failed; duplicates judged lexically",
                extra={"embedder": self._embedder.model, "error": type(exc).__name__},
            )
            return [0.0] * len(candidates)
        return [cosine(vectors[0], v) for v in vectors[1:]]

    async def _supersede(self, target: Memory, new_id_: str, proposal: WriteProposal, scope: ExtractionScope) -> None:
        await self._store.deactivate(
            scope.tenant_id,
            scope.user_id,
            target.id,
            Deactivation(
                status=MemoryStatus.SUPERSEDED,
                reason=f"superseded by {new_id_}",
                run_id=scope.run_id,
                evidence_quote=proposal.evidence_quote,
                source_message_ids=proposal.source_message_ids,
                superseded_by=new_id_,
            ),
        )

    # ---- memory_forget -------------------------------------------------------------------------------------

    async def _forget(self, proposal: ForgetProposal, scope: ExtractionScope) -> GateOutcome:
        self._check_confidence(proposal.confidence)
        await self._active_target(scope, proposal.memory_id)
        check_grounding(proposal.evidence_quote, proposal.source_message_ids, scope)
        status = MemoryStatus(proposal.mode)
        updated = await self._store.deactivate(
            scope.tenant_id,
            scope.user_id,
            proposal.memory_id,
            Deactivation(
                status=status,
                reason=proposal.reason,
                run_id=scope.run_id,
                evidence_quote=proposal.evidence_quote,
                source_message_ids=proposal.source_message_ids,
            ),
        )
        if updated is None:
            raise ProposalRejected("memory_not_active", f"memory {proposal.memory_id} changed concurrently; not active")
        decision: Decision = "retracted" if status is MemoryStatus.RETRACTED else "superseded"
        return GateOutcome(
            MEMORY_FORGET,
            decision,
            decision,
            f"the user's own words withdraw it; marked {decision} and kept for audit",
            memory_id=proposal.memory_id,
        )

    # ---- shared checks -------------------------------------------------------------------------------------

    def _check_confidence(self, confidence: float) -> None:
        if confidence < self.confidence_threshold:
            raise ProposalRejected(
                "below_confidence_threshold",
                f"confidence {confidence:.2f} is below the threshold {self.confidence_threshold:.2f}; "
                "recorded, not persisted",
            )

    async def _active_target(self, scope: ExtractionScope, memory_id: str) -> Memory:
        target = await self._store.get(scope.tenant_id, scope.user_id, memory_id)
        if target is None:
            raise ProposalRejected(
                "not_a_memory_of_this_user",
                f"no memory {memory_id!r} belongs to this user; refused",
                target_memory_id=memory_id[:100],
            )
        if not target.is_active:
            raise ProposalRejected(
                "memory_not_active",
                f"memory {memory_id} is already {target.status.value}",
                target_memory_id=memory_id,
            )
        return target


def _parse(model: type[_P], arguments: str) -> _P:
    try:
        return model.model_validate_json(arguments or "{}")
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(arguments)'}: {e['msg']}" for e in exc.errors())
        raise ProposalRejected(
            "invalid_arguments", f"the arguments do not match the tool's schema: {problems}"
        ) from None


def _merge_ids(existing: Sequence[str], new: Sequence[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys([*existing, *new]))[:MAX_KEPT_SOURCE_IDS]


def _summary(proposal: WriteProposal | ForgetProposal) -> dict[str, Any]:
    """What the audit keeps of a proposal: enough to review a decision, the full text only as a short preview."""
    data: dict[str, Any] = {
        "confidence": proposal.confidence,
        "source_message_ids": list(proposal.source_message_ids),
        "evidence_digest": digest(proposal.evidence_quote),
    }
    if isinstance(proposal, WriteProposal):
        data |= {
            "kind": proposal.kind.value,
            "content_preview": proposal.content[:120],
            "content_digest": digest(proposal.content),
            "supersedes": proposal.supersedes,
        }
    else:
        data |= {"target_memory_id": proposal.memory_id[:100], "mode": proposal.mode, "forget_reason": proposal.reason}
    return data
