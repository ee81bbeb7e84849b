"""Memory follows the branch (docs/memory.md, "Memories and branches"): the memory worker's extraction retracts a
memory whose only evidence is on a branch the user edited away, on DynamoDB (moto) and Redis, with a scripted
model for the chat runs and the memory run."""

from __future__ import annotations

from typing import Any

from shared.memory.branch_retraction import ABANDONED_BRANCH_REASON
from shared.memory.models import Memory, MemoryKind, MemoryStatus
from shared.models import Identity
from tests.support.chat_requests import post_run, run_body, user
from tests.support.scripted_model import ScriptedModel, Turn

ALICE = Identity(tenant_id="tenant-1", user_id="user-1")


def memory(mid: str, content: str, sources: tuple[str, ...], thread: str) -> Memory:
    return Memory(
        id=mid,
        tenant_id="tenant-1",
        user_id="user-1",
        kind=MemoryKind.PROFILE,
        content=content,
        confidence=0.9,
        evidence_quote=content,
        source_message_ids=sources,
        thread_id=thread,
    )


async def test_a_memory_whose_evidence_was_edited_away_is_retracted_by_the_memory_worker(
    make_services: Any, asgi_client: Any
) -> None:
    # GIVEN a thread where the user said where she lives, and memories drawn from it and from elsewhere
    model = ScriptedModel(Turn(text=["Noted."]), Turn(text=["Rome, then."]), Turn(text=["nothing to remember"]))
    services = make_services(model)
    async with asgi_client(services) as client:
        await post_run(client, run_body("th-mem", "r1", [user("u1", "I live in Paris")]))
        memories = services.memories
        await memories.put(memory("mem-paris", "lives in Paris", ("u1",), "th-mem"))
        await memories.put(memory("mem-other", "likes tea", ("x1",), "th-other"))
        # WHEN she edits that message (a new branch from the start), and the memory worker runs after the quiet time
        await post_run(
            client,
            run_body("th-mem", "r2", [user("u1b", "I live in Rome")], forwardedProps={"parentMessageId": None}),
        )
        await services.runs.wait_idle()
        report = await services.memory_extraction.extract(ALICE, "th-mem", run_id="mem-run-1")
    # THEN the memory whose only evidence is on the abandoned branch is retracted, saying why; the other stays
    assert report.status == "extracted"
    paris = await memories.get("tenant-1", "user-1", "mem-paris")
    other = await memories.get("tenant-1", "user-1", "mem-other")
    assert paris is not None and paris.status is MemoryStatus.RETRACTED
    assert paris.status_reason == ABANDONED_BRANCH_REASON and paris.status_run_id == "mem-run-1"
    assert other is not None and other.status is MemoryStatus.ACTIVE
    # AND the memory run read only the current branch
    memory_request = " ".join(m.content or "" for m in model.requests[2].messages)
    assert "I live in Rome" in memory_request and "I live in Paris" not in memory_request


async def test_a_memory_with_evidence_on_the_current_branch_stays(make_services: Any, asgi_client: Any) -> None:
    model = ScriptedModel(Turn(text=["A1"]), Turn(text=["A1 again"]), Turn(text=["nothing"]))
    services = make_services(model)
    async with asgi_client(services) as client:
        await post_run(client, run_body("th-keep", "r1", [user("u1", "I live in Paris")]))
        await services.memories.put(memory("mem-paris", "lives in Paris", ("u1",), "th-keep"))
        # WHEN the answer is regenerated: the question stays on the current branch
        await post_run(
            client, run_body("th-keep", "r2", [user("u1", "I live in Paris")], forwardedProps={"regenerate": True})
        )
        await services.runs.wait_idle()
        await services.memory_extraction.extract(ALICE, "th-keep", run_id="mem-run-2")
    kept = await services.memories.get("tenant-1", "user-1", "mem-paris")
    assert kept is not None and kept.status is MemoryStatus.ACTIVE
