"""The memory quality gate against adversarial proposals: nothing ungrounded, echoed, doubtful, duplicated or
foreign is persisted, and every decision is recorded with why."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from shared.adapters.in_memory.memories import InMemoryMemoryStore
from shared.memory.gate import AUDIT_KIND, ExtractionScope, MemoryGate
from shared.memory.injection import render_memories
from shared.memory.models import Memory, MemoryKind, MemoryStatus
from shared.models import AuditRecord, ExecutionMeta, Message, Origin, Role

TENANT, USER, OTHER_USER, THREAD, RUN = "t1", "u1", "u2", "th1", "mem_run_1"
THRESHOLD = 0.7
INJECTED = render_memories(
    [
        Memory(
            id="mem_cat",
            tenant_id=TENANT,
            user_id=USER,
            kind=MemoryKind.PROFILE,
            content="Has a cat named Mimi",
            confidence=0.9,
            evidence_quote="my cat Mimi",
        )
    ]
)


class ListAudit:
    def __init__(self) -> None:
        self.records: list[AuditRecord] = []

    async def record(self, record: AuditRecord) -> None:
        self.records.append(record)

    async def list_for_thread(self, tenant_id: str, thread_id: str, *, limit: int) -> list[AuditRecord]:
        return [r for r in self.records if r.tenant_id == tenant_id and r.thread_id == thread_id][:limit]


def msg(mid: str, seq: int, role: Role, content: str, **kw: Any) -> Message:
    return Message(id=mid, thread_id=THREAD, role=role, content=content, seq=seq, **kw)


WINDOW = (
    msg("m1", 1, Role.USER, "I live in Beijing."),
    msg("m2", 2, Role.ASSISTANT, "Noted! You are a vegetarian, right? I can suggest recipes."),
    msg("m3", 3, Role.USER, "I just started working as a nurse at a hospital in Shanghai."),
    msg("m4", 4, Role.TOOL, '{"city": "Paris", "forecast": "sunny all week"}', tool_call_id="c1"),
    msg("m5", 5, Role.SYSTEM, INJECTED),
    msg("m6", 6, Role.USER, "顺便说一下，我对花生过敏。"),
    msg("m7", 7, Role.USER, "Summarise: I prefer tea over coffee.", meta=ExecutionMeta(origin=Origin.AUTOMATION)),
    msg("m8", 8, Role.USER, "Please forget that I work as a nurse, that was a joke."),
)
NEW = frozenset({"m3", "m4", "m5", "m6", "m7", "m8"})


def write(content: str, quote: str, sources: list[str], confidence: float = 0.9, **kw: Any) -> str:
    return json.dumps(
        {
            "kind": "profile",
            "content": content,
            "confidence": confidence,
            "evidence_quote": quote,
            "source_message_ids": sources,
            **kw,
        }
    )


def forget(memory_id: str, quote: str, sources: list[str], confidence: float = 0.9) -> str:
    return json.dumps(
        {
            "memory_id": memory_id,
            "reason": "the user withdrew it",
            "confidence": confidence,
            "evidence_quote": quote,
            "source_message_ids": sources,
        }
    )


def existing(mid: str, content: str, user: str = USER) -> Memory:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    return Memory(
        id=mid,
        tenant_id=TENANT,
        user_id=user,
        kind=MemoryKind.PROFILE,
        content=content,
        confidence=0.9,
        evidence_quote=content,
        source_message_ids=("old",),
        created_at=at,
        updated_at=at,
    )


@pytest.fixture
async def setup() -> tuple[MemoryGate, InMemoryMemoryStore, ListAudit, ExtractionScope]:
    store = InMemoryMemoryStore()
    await store.put(existing("mem_job", "Works as a nurse at a hospital in Shanghai"))
    await store.put(existing("mem_home", "Lives in Hangzhou"))
    await store.put(existing("mem_other", "Loves jazz", user=OTHER_USER))
    audit = ListAudit()
    gate = MemoryGate(store, audit, confidence_threshold=THRESHOLD)
    scope = ExtractionScope(TENANT, USER, THREAD, RUN, WINDOW, NEW)
    return gate, store, audit, scope


async def snapshot(store: InMemoryMemoryStore) -> dict[str, Memory]:
    mine = await store.list_memories(TENANT, USER, include_inactive=True)
    theirs = await store.list_memories(TENANT, OTHER_USER, include_inactive=True)
    return {m.id: m for m in [*mine, *theirs]}


ADVERSARIAL = [
    pytest.param(
        "memory_write",
        write("Has three cats", "I have three cats at home", ["m3"]),
        "evidence_not_found",
        id="invented-evidence",
    ),
    pytest.param(
        "memory_write",
        write("Is vegetarian", "You are a vegetarian", ["m3"]),
        "evidence_not_from_user",
        id="evidence-only-in-an-assistant-message",
    ),
    pytest.param(
        "memory_write",
        write("Is vegetarian", "You are a vegetarian", ["m2"]),
        "source_not_user_message",
        id="assistant-message-cited-as-source",
    ),
    pytest.param(
        "memory_write",
        write("Is going to Paris", "forecast sunny all week", ["m3"]),
        "evidence_not_from_user",
        id="evidence-only-in-a-tool-message",
    ),
    pytest.param(
        "memory_write",
        write("Is going to Paris", "forecast sunny all week", ["m4"]),
        "source_not_user_message",
        id="tool-message-cited-as-source",
    ),
    pytest.param(
        "memory_write",
        write("Prefers tea over coffee", "I prefer tea over coffee", ["m7"]),
        "source_not_user_message",
        id="automation-prompt-cited-as-source",
    ),
    pytest.param(
        "memory_write",
        write("对花生过敏", "我对花生过敏", ["m6"], confidence=0.5),
        "below_confidence_threshold",
        id="low-confidence",
    ),
    pytest.param(
        "memory_write",
        write("Has a cat named Mimi", "Has a cat named Mimi", ["m6"]),
        "evidence_from_memory_injection",
        id="re-extracted-injected-memory",
    ),
    pytest.param(
        "memory_write",
        write("Has a cat named Mimi", "Has a cat named Mimi", ["m5"]),
        "source_is_memory_injection",
        id="injected-memory-cited-as-source",
    ),
    pytest.param(
        "memory_write",
        write("Lives in Beijing", "I live in Beijing", ["m1"]),
        "source_already_processed",
        id="re-extraction-from-an-already-processed-message",
    ),
    pytest.param(
        "memory_write",
        write("Lives in Beijing", "I live in Beijing", ["m404"]),
        "source_not_in_window",
        id="unknown-source-message",
    ),
    pytest.param(
        "memory_forget",
        forget("mem_other", "Please forget that I work as a nurse", ["m8"]),
        "not_a_memory_of_this_user",
        id="forget-aimed-at-another-users-memory",
    ),
    pytest.param(
        "memory_forget",
        forget("mem_job", "forget everything about me", ["m8"]),
        "evidence_not_found",
        id="forget-with-invented-evidence",
    ),
    pytest.param(
        "memory_forget",
        forget("mem_job", "Please forget that I work as a nurse", ["m8"], confidence=0.3),
        "below_confidence_threshold",
        id="forget-with-low-confidence",
    ),
    pytest.param(
        "memory_write",
        '{"kind": "profile", "content": "x"}',
        "invalid_arguments",
        id="missing-provenance",
    ),
]


@pytest.mark.parametrize(("tool", "arguments", "reason"), ADVERSARIAL)
async def test_adversarial_proposal_is_not_persisted_and_is_recorded_with_why(
    setup: tuple[MemoryGate, InMemoryMemoryStore, ListAudit, ExtractionScope], tool: str, arguments: str, reason: str
) -> None:
    gate, store, audit, scope = setup
    before = await snapshot(store)
    # WHEN the gate reviews the proposal
    outcome = await gate.review(tool, arguments, scope)
    # THEN it is rejected for the expected reason, nothing changed in the store
    assert (outcome.decision, outcome.reason) == ("rejected", reason)
    assert await snapshot(store) == before
    # AND one memory_decision record says why
    [record] = audit.records
    assert record.kind == AUDIT_KIND and record.run_id == RUN and record.user_id == USER
    assert record.details["decision"] == "rejected" and record.details["reason"] == reason
    assert record.details["why"]
    # AND the model is told it was rejected and why
    assert json.loads(outcome.tool_result())["status"] == "rejected"


async def test_near_duplicate_is_merged_into_the_existing_memory_not_added(
    setup: tuple[MemoryGate, InMemoryMemoryStore, ListAudit, ExtractionScope],
) -> None:
    gate, store, audit, scope = setup
    before = {m.id for m in await store.list_memories(TENANT, USER)}
    outcome = await gate.review(
        "memory_write",
        write("Works as a nurse in a hospital in Shanghai", "working as a nurse at a hospital in Shanghai", ["m3"]),
        scope,
    )
    assert (outcome.decision, outcome.reason, outcome.memory_id) == ("merged", "near_duplicate", "mem_job")
    assert {m.id for m in await store.list_memories(TENANT, USER)} == before
    merged = await store.get(TENANT, USER, "mem_job")
    assert merged is not None and merged.merge_count == 1 and "m3" in merged.source_message_ids
    assert merged.content == "Works as a nurse at a hospital in Shanghai"
    assert audit.records[0].details["duplicate_of"] == "mem_job"


async def test_exact_duplicate_modulo_case_and_punctuation_is_merged(
    setup: tuple[MemoryGate, InMemoryMemoryStore, ListAudit, ExtractionScope],
) -> None:
    gate, store, _audit, scope = setup
    outcome = await gate.review(
        "memory_write", write("works as a NURSE at a hospital in Shanghai!", "working as a nurse", ["m3"]), scope
    )
    assert (outcome.decision, outcome.reason) == ("merged", "exact_duplicate")
    assert len(await store.list_memories(TENANT, USER)) == 2


async def test_grounded_new_fact_is_stored_with_provenance(
    setup: tuple[MemoryGate, InMemoryMemoryStore, ListAudit, ExtractionScope],
) -> None:
    gate, store, audit, scope = setup
    # the model's quote differs from the message only in punctuation and spacing
    outcome = await gate.review("memory_write", write("用户对花生过敏", "我对花生过敏", ["m6"], confidence=0.95), scope)
    assert outcome.decision == "stored" and outcome.memory_id is not None
    memory = await store.get(TENANT, USER, outcome.memory_id)
    assert memory is not None
    assert (memory.run_id, memory.thread_id, memory.source_message_ids) == (RUN, THREAD, ("m6",))
    assert (memory.evidence_quote, memory.confidence, memory.status) == ("我对花生过敏", 0.95, MemoryStatus.ACTIVE)
    assert audit.records[0].details["decision"] == "stored"


async def test_forget_retracts_with_reason_and_provenance_and_never_deletes(
    setup: tuple[MemoryGate, InMemoryMemoryStore, ListAudit, ExtractionScope],
) -> None:
    gate, store, _audit, scope = setup
    outcome = await gate.review("memory_forget", forget("mem_job", "forget that I work as a nurse", ["m8"]), scope)
    assert (outcome.decision, outcome.memory_id) == ("retracted", "mem_job")
    kept = await store.get(TENANT, USER, "mem_job")
    assert kept is not None and kept.status is MemoryStatus.RETRACTED
    assert (kept.status_reason, kept.status_run_id) == ("the user withdrew it", RUN)
    assert kept.status_source_message_ids == ("m8",)
    assert "mem_job" not in {m.id for m in await store.list_memories(TENANT, USER)}
    # a second forget of the same memory is refused: it is no longer active
    again = await gate.review("memory_forget", forget("mem_job", "forget that I work as a nurse", ["m8"]), scope)
    assert (again.decision, again.reason) == ("rejected", "memory_not_active")


async def test_update_supersedes_the_old_memory_and_links_it(
    setup: tuple[MemoryGate, InMemoryMemoryStore, ListAudit, ExtractionScope],
) -> None:
    gate, store, _audit, scope = setup
    outcome = await gate.review(
        "memory_write",
        write("Lives in Shanghai", "a hospital in Shanghai", ["m3"], supersedes="mem_home"),
        scope,
    )
    assert outcome.decision == "stored"
    old = await store.get(TENANT, USER, "mem_home")
    assert old is not None and old.status is MemoryStatus.SUPERSEDED and old.superseded_by == outcome.memory_id


async def test_supersedes_naming_another_users_memory_is_refused(
    setup: tuple[MemoryGate, InMemoryMemoryStore, ListAudit, ExtractionScope],
) -> None:
    gate, store, _audit, scope = setup
    before = await snapshot(store)
    outcome = await gate.review(
        "memory_write", write("Lives in Shanghai", "a hospital in Shanghai", ["m3"], supersedes="mem_other"), scope
    )
    assert (outcome.decision, outcome.reason) == ("rejected", "not_a_memory_of_this_user")
    assert await snapshot(store) == before


def test_numbers_keep_similar_facts_apart() -> None:
    from shared.memory.text import near_duplicate

    assert (
        near_duplicate("Has 2 children, both in primary school", "Has 3 children, both in primary school")[0] is False
    )
    assert near_duplicate("User lives in Beijing", "The user lives in Beijing.")[0] is True


async def test_the_same_fact_in_another_language_is_merged_by_meaning(
    setup: tuple[MemoryGate, InMemoryMemoryStore, ListAudit, ExtractionScope],
) -> None:
    # GIVEN "Lives in Hangzhou" is remembered; WHEN the model proposes it again in Chinese
    gate, store, audit, scope = setup
    await store.put(existing("mem_peanut", "Is allergic to peanuts"))
    outcome = await gate.review("memory_write", write("用户对花生过敏", "我对花生过敏", ["m6"]), scope)
    # THEN it is merged into the English memory (lexically they share nothing), and the audit says by what
    assert (outcome.decision, outcome.reason, outcome.memory_id) == ("merged", "semantic_duplicate", "mem_peanut")
    assert audit.records[-1].details["embedder"] == "lexicon-v1"
    assert len(await store.list_memories(TENANT, USER)) == 3


async def test_a_similar_but_different_fact_is_not_merged(
    setup: tuple[MemoryGate, InMemoryMemoryStore, ListAudit, ExtractionScope],
) -> None:
    gate, store, _audit, scope = setup
    await store.put(existing("mem_shellfish", "对海鲜过敏"))
    outcome = await gate.review("memory_write", write("对花生过敏", "我对花生过敏", ["m6"]), scope)
    assert (outcome.decision, outcome.reason) == ("stored", "stored")


class BrokenEmbedder:
    model = "broken"
    duplicate_similarity = 0.5

    async def embed(self, texts: Any) -> list[list[float]]:
        raise ConnectionError("embeddings endpoint down")


async def test_an_embeddings_outage_falls_back_to_the_lexical_rules(
    setup: tuple[MemoryGate, InMemoryMemoryStore, ListAudit, ExtractionScope],
) -> None:
    _gate, store, audit, scope = setup
    gate = MemoryGate(store, audit, confidence_threshold=THRESHOLD, embedder=BrokenEmbedder())
    near = write("Works as a nurse in a hospital in Shanghai", "working as a nurse at a hospital in Shanghai", ["m3"])
    assert (await gate.review("memory_write", near, scope)).reason == "near_duplicate"
    assert (await gate.review("memory_write", write("对花生过敏", "我对花生过敏", ["m6"]), scope)).decision == "stored"


async def test_a_hypothetical_quoted_correctly_is_rejected_with_its_marker(
    setup: tuple[MemoryGate, InMemoryMemoryStore, ListAudit, ExtractionScope],
) -> None:
    gate, store, audit, _scope = setup
    window = (msg("h1", 1, Role.USER, "Hypothetically, if I moved to Japan, what visa would I need?"),)
    scope = ExtractionScope(TENANT, USER, THREAD, RUN, window, frozenset({"h1"}))
    outcome = await gate.review("memory_write", write("Is moving to Japan", "if I moved to Japan", ["h1"]), scope)
    assert (outcome.decision, outcome.reason) == ("rejected", "hypothetical_context")
    assert audit.records[-1].details["context_marker"] == "Hypothetically"
    assert len(await store.list_memories(TENANT, USER)) == 2
