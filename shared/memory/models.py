"""Memories, memory proposals, and the values the memory ports carry (``shared.memory.ports``).

A :class:`Memory` is kept with its provenance (run, thread, source messages, evidence quote, confidence). It is
never hard-deleted by the model: ``memory_forget`` moves it to ``superseded`` or ``retracted`` and records why and
on what evidence. Only the user's own ``DELETE /memories/{id}`` removes the item.

A proposal is what the model asked for through a tool call; nothing is persisted until the gate
(:mod:`shared.memory.gate`) has accepted it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from shared.models import utc_now

MAX_CONTENT_CHARS = 500
MAX_QUOTE_CHARS = 500
MAX_SOURCE_IDS = 20
MAX_KEPT_SOURCE_IDS = 50
"""A memory merged many times keeps at most this many source message ids (the oldest first)."""


class MemoryKind(StrEnum):
    PROFILE = "profile"
    """Stable facts about the user: name, job, home, family, health."""
    PREFERENCE = "preference"
    """Likes, dislikes, habits, style."""
    GOAL = "goal"
    """Ongoing plans and projects."""
    INSTRUCTION = "instruction"
    """How the user wants the assistant to behave with them."""
    OTHER = "other"


class MemoryStatus(StrEnum):
    ACTIVE = "active"
    SUPERSEDED = "superseded"
    RETRACTED = "retracted"


class Memory(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    tenant_id: str
    user_id: str
    kind: MemoryKind
    content: str
    status: MemoryStatus = MemoryStatus.ACTIVE
    confidence: float = Field(ge=0, le=1)
    evidence_quote: str
    source_message_ids: tuple[str, ...] = ()
    run_id: str | None = None
    thread_id: str | None = None
    created_at: datetime = Field(default_factory=utc_now)
    updated_at: datetime = Field(default_factory=utc_now)
    merge_count: int = 0
    """How often a duplicate proposal was merged into this memory instead of being added."""
    superseded_by: str | None = None
    supersedes: str | None = None
    """The older version this memory replaces (a user's edit, or a superseding write)."""
    edited_by: str | None = None
    """The user who wrote this version by hand (``PATCH /memories/{id}``); None: written by the memory executor."""
    status_reason: str | None = None
    # Provenance of the status change (set by memory_forget or a superseding memory_write).
    status_changed_at: datetime | None = None
    status_run_id: str | None = None
    status_evidence_quote: str | None = None
    status_source_message_ids: tuple[str, ...] = ()

    @property
    def is_active(self) -> bool:
        return self.status is MemoryStatus.ACTIVE


class WriteProposal(BaseModel):
    """The arguments of ``memory_write``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: MemoryKind
    content: str = Field(min_length=1, max_length=MAX_CONTENT_CHARS)
    confidence: float = Field(ge=0, le=1)
    evidence_quote: str = Field(min_length=1, max_length=MAX_QUOTE_CHARS)
    source_message_ids: list[str] = Field(min_length=1, max_length=MAX_SOURCE_IDS)
    supersedes: str | None = None
    """An existing memory this one replaces (an update): it is marked superseded by the new one."""


class ForgetProposal(BaseModel):
    """The arguments of ``memory_forget``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    memory_id: str = Field(min_length=1)
    reason: str = Field(min_length=1, max_length=300)
    mode: Literal["retracted", "superseded"] = "retracted"
    confidence: float = Field(ge=0, le=1)
    evidence_quote: str = Field(min_length=1, max_length=MAX_QUOTE_CHARS)
    source_message_ids: list[str] = Field(min_length=1, max_length=MAX_SOURCE_IDS)


@dataclass(frozen=True)
class Deactivation:
    """An active memory marked superseded or retracted, with why and on what evidence: what
    ``MemoryStore.deactivate`` is given, and what every store writes (:meth:`applied_to`)."""

    status: MemoryStatus
    reason: str
    run_id: str
    evidence_quote: str
    source_message_ids: Sequence[str]
    superseded_by: str | None = None

    def applied_to(self, memory: Memory, now: datetime) -> Memory:
        """``memory`` as this change leaves it at ``now``."""
        if self.status is MemoryStatus.ACTIVE:
            raise ValueError("deactivate needs superseded or retracted")
        return memory.model_copy(
            update={
                "status": self.status,
                "status_reason": self.reason,
                "superseded_by": self.superseded_by,
                "status_changed_at": now,
                "status_run_id": self.run_id,
                "status_evidence_quote": self.evidence_quote,
                "status_source_message_ids": tuple(self.source_message_ids),
                "updated_at": now,
            }
        )


EXTRACTION_DUE: Literal["memory.extraction.due"] = "memory.extraction.due"


class ExtractionDue(BaseModel):
    """The body of a delayed "extraction due" message (same queue as the run-completed events)."""

    model_config = ConfigDict(populate_by_name=True, frozen=True)

    type: Literal["memory.extraction.due"] = EXTRACTION_DUE
    id: str = Field(default_factory=lambda: f"due_{uuid.uuid4().hex}", min_length=1)
    """Unique per message sent (the idempotency key: a redelivered copy is recognised)."""
    tenant_id: str = Field(alias="tenantId", min_length=1)
    user_id: str = Field(alias="userId", min_length=1)
    thread_id: str = Field(alias="threadId", min_length=1)
    generation: int = Field(ge=1)


@dataclass(frozen=True)
class PendingExtraction:
    """A thread's pending-extraction marker, as ``PendingExtractions.get`` returns it (shared/memory/ports.py)."""

    tenant_id: str
    thread_id: str
    user_id: str
    generation: int
    noted_at: datetime
    """When the last run-completed event was noted."""
    running_run_id: str | None = None
    lease_until: datetime | None = None

    def running(self, now: datetime) -> bool:
        return self.running_run_id is not None and self.lease_until is not None and self.lease_until > now


@dataclass(frozen=True)
class BusEvent:
    """One event for the event bus (the ``EventPublisher`` port): the run-completed events memory listens to."""

    source: str
    detail_type: str
    detail: dict[str, Any]

    def detail_json(self) -> str:
        return json.dumps(self.detail, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class PublishFailure:
    """One entry the bus did not accept (``index`` into the events passed to ``EventPublisher.publish``)."""

    index: int
    code: str
    message: str
