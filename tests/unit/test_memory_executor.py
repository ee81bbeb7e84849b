"""The memory executor's input, tool gate and cursor, and the memory note the worker injects."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import pytest

from devtools.memory_evaluation import CaseThread, ListAuditLog, ListStream
from shared.adapters.in_memory.memories import InMemoryMemoryStore
from shared.errors import ModelError
from shared.executors.context import RunContext
from shared.memory.executor import MemoryExecutor
from shared.memory.injection import MEMORY_INJECTION_SENTINEL, ActiveMemories, render_memories
from shared.memory.models import Memory, MemoryKind
from shared.models import ExecutionMeta, ExecutorKind, Identity, Message, MessagePart, Origin, Role
from shared.profiles import default_catalog
from shared.run_events.emitter import RunEmitter
from shared.run_results import ExecutionFailed
from tests.support.scripted_model import ScriptedModel, Turn

TENANT, USER, THREAD = "t1", "u1", "th1"


def ctx() -> RunContext:
    profile = default_catalog().get("automation_memory_default")
    return RunContext(
        identity=Identity(tenant_id=TENANT, user_id=USER),
        thread_id=THREAD,
        run_id="mem_run",
        profile=profile,
        meta=ExecutionMeta(
            origin=Origin.AUTOMATION,
            executor=ExecutorKind.MEMORY,
            execution_profile_name=profile.name,
            hidden_from_user=True,
        ),
    )


def memory(mid: str, content: str, *, age_days: int = 0) -> Memory:
    at = datetime(2026, 1, 10, tzinfo=UTC) - timedelta(days=age_days)
    return Memory(
        id=mid,
        tenant_id=TENANT,
        user_id=USER,
        kind=MemoryKind.PREFERENCE,
        content=content,
        confidence=0.9,
        evidence_quote=content,
        created_at=at,
        updated_at=at,
    )


THREAD_MESSAGES = [
    Message(id="m1", thread_id=THREAD, role=Role.USER, content="I live in Lyon.", seq=1),
    Message(id="m2", thread_id=THREAD, role=Role.ASSISTANT, content="Bonjour!", seq=2),
    Message(
        id="m3",
        thread_id=THREAD,
        role=Role.SYSTEM,
        seq=3,
        content=render_memories([memory("mem_tea", "Drinks green tea every morning")]),
    ),
    Message(id="m4", thread_id=THREAD, role=Role.USER, content="I started learning the cello.", seq=4),
]
WRITE_CELLO = json.dumps(
    {
        "kind": "goal",
        "content": "Is learning the cello",
        "confidence": 0.9,
        "evidence_quote": "I started learning the cello",
        "source_message_ids": ["m4"],
    }
)


async def run(model: ScriptedModel, store: InMemoryMemoryStore) -> tuple[MemoryExecutor, ListAuditLog, ListStream]:
    audit, stream = ListAuditLog(), ListStream()
    executor = MemoryExecutor(model, CaseThread(THREAD_MESSAGES), store, audit, confidence_threshold=0.7)
    await executor.execute(ctx(), RunEmitter(stream, "run:mem_run"))
    return executor, audit, stream


async def test_the_model_sees_new_messages_marked_related_memories_and_no_injected_text() -> None:
    store = InMemoryMemoryStore()
    await store.advance_cursor(TENANT, THREAD, 2)  # m1, m2 were processed by an earlier extraction
    await store.put(memory("mem_cello", "Wants to play the cello in an orchestra"))
    model = ScriptedModel(Turn(text=["none"]))
    await run(model, store)
    [request] = model.requests
    prompt = request.messages[-1].content or ""
    assert request.model == "qwen3.5-flash" and request.thinking == "off"
    assert sorted(t.name for t in request.tools) == ["memory_forget", "memory_write"]
    assert '<message id="m4" role="user" new="true">I started learning the cello.</message>' in prompt
    assert '<message id="m1" role="user">I live in Lyon.</message>' in prompt  # context, not new
    assert '<memory id="mem_cello" kind="preference">Wants to play the cello in an orchestra</memory>' in prompt
    assert "green tea" not in prompt and MEMORY_INJECTION_SENTINEL not in prompt


async def test_a_messages_images_and_files_reach_the_memory_model_as_placeholders_never_as_bytes() -> None:
    # GIVEN a new user message with a stored image, a PDF whose text was extracted, and a nameless image
    parts = (
        MessagePart(
            kind="image",
            mime_type="image/png",
            key="t1/u1/th1/m9/0-ab",
            filename="cat.png",
            width=640,
            height=480,
            size=2_000,
        ),
        MessagePart(
            kind="document",
            mime_type="application/pdf",
            key="t1/u1/th1/m9/1-cd",
            filename="lease]\n.pdf",
            text="SECRET CLAUSE: the tenant owes 9000 euros",
        ),
        MessagePart(kind="image", mime_type="image/jpeg", url="https://example.com/x.jpg"),
    )
    messages = [Message(id="m9", thread_id=THREAD, role=Role.USER, content="My cat, and my lease.", seq=1, parts=parts)]
    model = ScriptedModel(Turn(text=["none"]))
    executor = MemoryExecutor(
        model, CaseThread(messages), InMemoryMemoryStore(), ListAuditLog(), confidence_threshold=0.7
    )
    # WHEN the memory executor runs
    await executor.execute(ctx(), RunEmitter(ListStream(), "run:mem_run"))
    prompt = model.requests[0].messages[-1].content or ""
    # THEN the model sees the text and one placeholder per part, the client's name unable to break out of it
    assert (
        '<message id="m9" role="user" new="true">My cat, and my lease.\n[image: cat.png, 640x480]\n'
        "[document: lease .pdf]\n[image]</message>"
    ) in prompt
    # AND nothing of the parts' contents or where they are
    assert "SECRET CLAUSE" not in prompt and "t1/u1/th1" not in prompt and "example.com" not in prompt


async def test_the_input_is_the_new_messages_plus_two_cut_turns_of_context_not_the_whole_window() -> None:
    # GIVEN a thread of 30 processed turns with long answers, then two new turns
    messages: list[Message] = []
    for i in range(1, 33):
        messages.append(
            Message(id=f"u{i}", thread_id=THREAD, role=Role.USER, content=f"question {i} " + "q" * 300, seq=2 * i - 1)
        )
        messages.append(
            Message(id=f"a{i}", thread_id=THREAD, role=Role.ASSISTANT, content=f"answer {i} " + "x" * 900, seq=2 * i)
        )
    store = InMemoryMemoryStore()
    await store.advance_cursor(TENANT, THREAD, 60)  # turns 1-30 were processed
    model = ScriptedModel(Turn(text=["none"]))
    executor = MemoryExecutor(model, CaseThread(messages), store, ListAuditLog(), confidence_threshold=0.7)
    await executor.execute(ctx(), RunEmitter(ListStream(), "run:mem_run"))
    prompt = model.requests[0].messages[-1].content or ""
    shown = re.findall(r'<message id="([^"]+)"', prompt)
    # THEN it sees turns 29-30 as context and turns 31-32 as new, nothing older
    assert shown == ["u29", "a29", "u30", "a30", "u31", "a31", "u32", "a32"]
    assert re.findall(r'<message id="([^"]+)" role="user" new="true">', prompt) == ["u31", "u32"]
    # AND the new user messages are whole; context and assistant text are cut
    assert "question 31 " + "q" * 300 + "</message>" in prompt
    assert "question 29 " + "q" * 300 not in prompt and "answer 31 " + "x" * 900 not in prompt
    assert len(prompt) < 3_000


async def test_proposals_go_through_the_gate_and_results_are_fed_back_then_the_cursor_moves() -> None:
    store = InMemoryMemoryStore()
    await store.advance_cursor(TENANT, THREAD, 2)
    model = ScriptedModel(Turn(tool_calls=[("c1", "memory_write", WRITE_CELLO)]), Turn(text=["done"]))
    executor, audit, stream = await run(model, store)
    assert [m.content for m in await store.list_memories(TENANT, USER)] == ["Is learning the cello"]
    fed_back = model.requests[1].messages[-1]
    assert fed_back.role == "tool" and json.loads(fed_back.content or "")["status"] == "stored"
    assert await store.get_cursor(TENANT, THREAD) == 4
    assert [r.kind for r in audit.records] == ["tool_decision", "memory_decision", "memory_run"]
    types = [e.event["type"] for e in stream.entries]
    assert types[0] == "STEP_STARTED" and types[-1] == "STEP_FINISHED" and "TOOL_CALL_RESULT" in types
    assert executor.last_result is not None and executor.last_result.decisions() == {"stored": 1}


async def test_a_tool_outside_the_memory_profile_is_refused_by_the_tool_gate() -> None:
    store = InMemoryMemoryStore()
    model = ScriptedModel(Turn(tool_calls=[("c1", "get_current_time", "{}")]), Turn(text=["done"]))
    executor, audit, _stream = await run(model, store)
    assert executor.last_result is not None and executor.last_result.tool_refusals == 1
    [decision] = [r for r in audit.records if r.kind == "tool_decision"]
    assert decision.details["decision"] == "refused"
    assert json.loads(model.requests[1].messages[-1].content or "")["error"]["code"] == "tool_not_allowed"


async def test_a_failed_run_leaves_the_cursor_so_a_retry_sees_the_same_messages() -> None:
    store = InMemoryMemoryStore()
    model = ScriptedModel(Turn(raise_error=ModelError("endpoint down")))
    with pytest.raises(ExecutionFailed) as failed:
        await run(model, store)
    assert isinstance(failed.value.cause, ModelError) and failed.value.usage == []
    assert await store.get_cursor(TENANT, THREAD) == 0


async def test_a_failure_after_a_model_turn_carries_that_turns_usage_to_the_ledger() -> None:
    store = InMemoryMemoryStore()
    model = ScriptedModel(
        Turn(tool_calls=[("c1", "memory_write", WRITE_CELLO)], input_tokens=321, output_tokens=12),
        Turn(raise_error=ModelError("endpoint down")),
    )
    with pytest.raises(ExecutionFailed) as failed:
        await run(model, store)
    cause, usage = ExecutionFailed.unwrap(failed.value)
    assert isinstance(cause, ModelError)
    assert [(u.input_tokens, u.output_tokens) for u in usage] == [(321, 12)]


async def test_nothing_new_from_the_user_means_no_model_call() -> None:
    store = InMemoryMemoryStore()
    await store.advance_cursor(TENANT, THREAD, 4)
    model = ScriptedModel()
    await run(model, store)
    assert model.requests == []


def test_render_memories_is_bounded_marked_and_most_relevant_first() -> None:
    memories = [memory(f"mem_{i}", f"Filler preference number {i}", age_days=i) for i in range(40)]
    memories.append(memory("mem_cello", "Is learning the cello", age_days=30))
    note = render_memories(memories, query="which cello strings should I buy?", limit=5)
    lines = note.splitlines()
    assert lines[0].startswith(MEMORY_INJECTION_SENTINEL) and lines[-1] == "[/memory-injection]"
    assert lines[1] == "- (preference) Is learning the cello"
    assert len(lines) == 5 + 2
    assert len(render_memories(memories, max_chars=300)) <= 300
    assert render_memories([]) == ""


async def test_the_worker_reads_active_memories_ranked_and_the_note_keeps_that_order() -> None:
    store = InMemoryMemoryStore()
    await store.put(memory("mem_new", "Collects vintage stamps"))
    await store.put(memory("mem_cello", "Is learning the cello", age_days=300))
    await store.put(memory("mem_other", "Is learning the cello", age_days=1).model_copy(update={"user_id": "u2"}))
    ranked = await ActiveMemories(store).relevant_active(Identity(tenant_id=TENANT, user_id=USER), "cello", limit=5)
    assert [m.id for m in ranked] == ["mem_cello", "mem_new"]
    lines = render_memories(ranked).splitlines()
    assert lines[1:3] == ["- (preference) Is learning the cello", "- (preference) Collects vintage stamps"]


async def test_related_memories_are_found_by_meaning_across_languages() -> None:
    # GIVEN 15 memories, one of them the English form of what the user now says in Chinese
    store = InMemoryMemoryStore()
    for i in range(14):
        await store.put(memory(f"mem_{i}", f"Prefers meeting slot {i} on weekdays", age_days=0))
    await store.put(memory("mem_peanut", "Is allergic to peanuts", age_days=30))
    chinese = [Message(id="z1", thread_id=THREAD, role=Role.USER, content="我对花生过敏，帮我看看这个菜谱。", seq=1)]
    model = ScriptedModel(Turn(text=["none"]))
    executor = MemoryExecutor(model, CaseThread(chinese), store, ListAuditLog(), confidence_threshold=0.7)
    await executor.execute(ctx(), RunEmitter(ListStream(), "run:mem_run"))
    # THEN the oldest memory, which shares no word with the message, is among the 10 shown
    prompt = model.requests[0].messages[-1].content or ""
    assert '<memory id="mem_peanut"' in prompt
    assert prompt.count("<memory id=") == 10


async def test_the_worker_note_is_the_same_text_whatever_the_message_when_the_memories_did_not_change() -> None:
    # GIVEN a user with a few memories
    store = InMemoryMemoryStore()
    await store.put(memory("mem_tea", "Drinks green tea every morning", age_days=3))
    await store.put(memory("mem_cello", "Is learning the cello", age_days=10))
    await store.put(memory("mem_lyon", "Lives in Lyon", age_days=1))
    reader = ActiveMemories(store)
    me = Identity(tenant_id=TENANT, user_id=USER)
    # WHEN two runs rank them against different messages
    notes = [await reader.note(me, query, limit=20) for query in ("which cello strings?", "a good tea shop in Lyon?")]
    # THEN the note is the same text (the provider's prefix cache keeps it), oldest memory first
    assert notes[0] == notes[1]
    assert notes[0].splitlines()[1] == "- (preference) Is learning the cello"
