"""The ``enqueue`` strategy on its own (``shared.runs.queueing``): what is queued or refused, and who starts a queued
run. The wire behaviour is in tests/e2e/test_enqueue_e2e.py and across instances in
tests/lambda_emulation/test_enqueue_across_instances.py."""

from __future__ import annotations

import time

import pytest

from shared.adapters.in_memory.run_queue import InMemoryRunQueue
from shared.errors import Conflict, NotFound
from shared.models import ExecutionMeta, Identity, Run, Thread, utc_now
from shared.ports.run_queue import QueuedRun
from shared.runs.claims import Admission
from shared.runs.queueing import HAND_OVER_GRACE_S, Enqueuing

ALICE = Identity(tenant_id="t", user_id="alice")
MALLORY = Identity(tenant_id="t", user_id="mallory")


class Threads:
    """One thread of alice's, held by ``holder``; the runs started so far."""

    def __init__(self, holder: str | None) -> None:
        self.holder = holder
        self.runs: dict[str, Run] = {}

    async def get_thread(self, identity: Identity, thread_id: str) -> Thread:
        if identity.user_id != "alice":
            raise NotFound("thread not found")
        return Thread(thread_id=thread_id, tenant_id="t", owner_user_id="alice", active_run_id=self.holder)

    async def get_run(self, tenant_id: str, run_id: str) -> Run | None:
        return self.runs.get(run_id)


def queued(run_id: str, waiter_until: float) -> QueuedRun:
    return QueuedRun(run_id, "alice", (), run_id.encode(), utc_now(), waiter_until)


def rig(holder: str | None) -> tuple[InMemoryRunQueue, Threads, Enqueuing, list[str]]:
    queue, threads, started = InMemoryRunQueue(), Threads(holder), []

    async def start(caller: Identity, body: bytes, _deadline: float | None) -> Admission:
        if threads.holder is not None:
            raise Conflict("busy", code="thread_busy")
        run = Run(run_id=body.decode(), thread_id="th", tenant_id="t", user_id=caller.user_id, meta=ExecutionMeta())
        threads.runs[run.run_id], threads.holder = run, run.run_id
        started.append(run.run_id)
        return Admission(run=run, created=True)

    return queue, threads, Enqueuing(queue, threads, threads, start), started


async def never() -> Admission:
    raise AssertionError("a thread with queued runs must not be claimed ahead of them")


async def test_a_full_queue_refuses_with_queue_full_and_stores_nothing() -> None:
    queue, _, enqueuing, _ = rig(holder="run-0")
    for i in range(2):
        await queue.enqueue("t", "th", queued(f"q{i}", time.time() + 60), depth=2)
    with pytest.raises(Conflict) as refused:
        await enqueuing.admit(ALICE, "th", "q2", b"q2", depth=2, deadline=time.time() + 900, attempt=never)
    assert refused.value.code == "queue_full"
    assert [e.run_id for e in await queue.entries("t", "th")] == ["q0", "q1"]


async def test_someone_elses_thread_with_a_queue_is_not_found_and_nothing_is_queued() -> None:
    queue, _, enqueuing, _ = rig(holder="run-0")
    await queue.enqueue("t", "th", queued("q0", time.time() + 60), depth=3)
    with pytest.raises(NotFound):
        await enqueuing.admit(MALLORY, "th", "evil", b"evil", depth=3, deadline=time.time() + 900, attempt=never)
    assert [e.run_id for e in await queue.entries("t", "th")] == ["q0"]


async def test_the_run_that_frees_the_thread_leaves_a_queued_run_to_its_waiting_request() -> None:
    queue, _, enqueuing, started = rig(holder=None)
    await queue.enqueue("t", "th", queued("q0", time.time() + 60), depth=3)
    await enqueuing.thread_queue("t", "th").hand_over(until=time.time() + 60, wait_settled=_settled)
    assert started == [] and [e.run_id for e in await queue.entries("t", "th")] == ["q0"]


async def test_the_run_that_frees_the_thread_starts_a_queued_run_whose_request_has_gone() -> None:
    queue, threads, enqueuing, started = rig(holder=None)
    await queue.enqueue("t", "th", queued("q0", time.time() - HAND_OVER_GRACE_S), depth=3)
    await queue.enqueue("t", "th", queued("q1", time.time() + 60), depth=3)
    settled: list[str] = []

    async def settle(tenant_id: str, run_id: str) -> None:
        settled.append(run_id)
        threads.holder = None  # the handed-over run ends and frees the thread

    await enqueuing.thread_queue("t", "th").hand_over(until=time.time() + 60, wait_settled=settle)
    # q0 ran here and settled; q1's own request is still there to start it
    assert started == ["q0"] and settled == ["q0"]
    assert [e.run_id for e in await queue.entries("t", "th")] == ["q1"]


async def _settled(tenant_id: str, run_id: str) -> None:
    return None
