"""The coalescer's decisions with in-memory parts: debounce by generation, K pending messages, lease, cancels."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from shared.adapters.in_memory.pending_extractions import InMemoryPendingExtractions
from shared.memory.coalescing import ExtractionCoalescer, ExtractionDue
from shared.memory.job import ExtractionReport, RunCompleted
from shared.models import Identity
from shared.profiles import default_catalog

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


class FakeExtraction:
    def __init__(self) -> None:
        self.pending = 0
        self.runs: list[str] = []

    async def owns_thread(self, identity: Identity, thread_id: str) -> bool:
        return thread_id != "th-unknown"

    async def pending_user_messages(self, tenant_id: str, thread_id: str) -> int:
        return self.pending

    async def extract(self, identity: Identity, thread_id: str, *, run_id: str, **_: Any) -> ExtractionReport:
        self.runs.append(run_id)
        self.pending = 0
        return ExtractionReport("extracted", "ok", run_id)


class ListQueue:
    def __init__(self) -> None:
        self.sent: list[tuple[ExtractionDue, int]] = []

    async def send(self, due: ExtractionDue, *, delay_s: int) -> None:
        self.sent.append((due, delay_s))


def event(thread: str = "th", user: str = "u") -> RunCompleted:
    return RunCompleted.model_validate({"tenantId": "t", "userId": user, "threadId": thread, "runId": "r"})


def build() -> tuple[ExtractionCoalescer, FakeExtraction, InMemoryPendingExtractions, ListQueue]:
    extraction, pending, queue = FakeExtraction(), InMemoryPendingExtractions(), ListQueue()
    coalescer = ExtractionCoalescer(extraction, pending, queue, default_catalog(), clock=lambda: T0)  # type: ignore[arg-type]
    return coalescer, extraction, pending, queue


async def test_only_the_newest_due_message_extracts() -> None:
    coalescer, extraction, _pending, queue = build()
    for pending in (1, 2, 3):
        extraction.pending = pending
        assert (await coalescer.on_run_completed(event())).status == "scheduled"
    assert [(d.generation, delay) for d, delay in queue.sent] == [(1, 120), (2, 120), (3, 120)]
    reports = [await coalescer.on_due(d) for d, _ in queue.sent]
    assert [r.reason for r in reports] == ["superseded_by_a_later_turn", "superseded_by_a_later_turn", "ok"]
    assert len(extraction.runs) == 1


async def test_k_pending_user_messages_extract_at_once_without_a_due_message() -> None:
    coalescer, extraction, _pending, queue = build()
    extraction.pending = 6
    report = await coalescer.on_run_completed(event())
    assert report.status == "extracted" and queue.sent == []


async def test_unknown_threads_non_worker_runs_and_foreign_due_messages_do_nothing() -> None:
    coalescer, extraction, pending, queue = build()
    assert (await coalescer.on_run_completed(event("th-unknown"))).reason == "thread_not_found"
    memory_run = RunCompleted.model_validate(
        {"tenantId": "t", "userId": "u", "threadId": "th", "runId": "r", "executor": "memory"}
    )
    assert (await coalescer.on_run_completed(memory_run)).reason == "not_a_worker_run"
    await pending.note("t", "u", "th", now=T0)
    forged = ExtractionDue(tenant_id="t", user_id="someone-else", thread_id="th", generation=1)
    assert (await coalescer.on_due(forged)).reason == "cancelled"
    assert extraction.runs == [] and queue.sent == []


async def test_a_held_lease_sends_the_due_message_again_for_later() -> None:
    coalescer, extraction, pending, queue = build()
    await pending.note("t", "u", "th", now=T0)
    assert await pending.acquire("t", "th", "other-run", now=T0, lease_until=T0 + timedelta(seconds=900))
    due = ExtractionDue(tenant_id="t", user_id="u", thread_id="th", generation=1)
    assert (await coalescer.on_due(due)).reason == "run_in_flight"
    [(again, delay)] = queue.sent
    assert (again.generation, delay) == (1, 30) and again.id != due.id
    assert extraction.runs == []


async def test_thread_and_user_cancellation() -> None:
    coalescer, extraction, pending, queue = build()
    extraction.pending = 1
    await coalescer.on_run_completed(event("th-1"))
    await coalescer.on_run_completed(event("th-2"))
    await pending.cancel_thread("t", "th-1")
    await pending.cancel_user("t", "u", now=T0)
    assert [(await coalescer.on_due(d)).reason for d, _ in queue.sent] == ["cancelled", "user_cancelled"]
    assert extraction.runs == []
