"""Admission on its own (``shared.runs.admission.Admitter``), on the in-memory adapters: a run is stored with its
messages and its thread claimed, a retry attaches, and a refusal stores nothing."""

from __future__ import annotations

from datetime import timedelta

import pytest

from shared.adapters.in_memory.store import InMemoryStore
from shared.adapters.in_memory.stream import InMemoryEventStream
from shared.errors import Conflict, InvalidRequest, NotFound, ServiceUnavailable
from shared.executors.context import RunContext
from shared.models import ExecutionMeta, ExecutorKind, Identity, Message, Origin, Role
from shared.profiles import default_catalog
from shared.runs.admission import Admitter
from shared.runs.claims import Claim

USER = Identity(tenant_id="t", user_id="u")
META = ExecutionMeta(origin=Origin.CHAT, executor=ExecutorKind.WORKER)


def a_context(run_id: str, thread_id: str = "th") -> RunContext:
    profile = default_catalog().get("chat_default")
    return RunContext(identity=USER, thread_id=thread_id, run_id=run_id, profile=profile, meta=META)


def a_message(message_id: str, thread_id: str = "th") -> Message:
    return Message(id=message_id, thread_id=thread_id, role=Role.USER, content="hi", meta=META)


class StreamDown(InMemoryEventStream):
    async def ping(self) -> bool:
        return False


@pytest.fixture
def store() -> InMemoryStore:
    return InMemoryStore()


def admitter(store: InMemoryStore, stream: InMemoryEventStream | None = None) -> Admitter:
    stream = stream or InMemoryEventStream()
    return Admitter(store.threads, store.runs, store.audit, stream, lease=timedelta(seconds=30))


async def test_a_new_run_is_stored_with_its_messages_and_claims_its_thread(store: InMemoryStore) -> None:
    # WHEN a run is admitted with one new message
    admission = await admitter(store).admit(a_context("r1"), body_digest="d", new_messages=[a_message("m1")])
    # THEN it is created, its message is on the thread, and the thread is the run's
    assert admission.created and admission.run.run_id == "r1"
    assert [m.id for m in await store.threads.read_forward("t", "th", after_seq=0, limit=10)] == ["m1"]
    assert (await store.threads.get_thread(USER, "th")).active_run_id == "r1"


async def test_a_retry_of_the_same_request_attaches_and_stores_nothing_more(store: InMemoryStore) -> None:
    admit = admitter(store)
    await admit.admit(a_context("r1"), body_digest="d", new_messages=[a_message("m1")])
    # WHEN the same request comes again (the thread is busy with that very run)
    again = await admit.admit(a_context("r1"), body_digest="d", new_messages=[a_message("m1")])
    # THEN it attaches to the stored run
    assert not again.created and again.run.run_id == "r1"
    assert len(await store.threads.read_forward("t", "th", after_seq=0, limit=10)) == 1


async def test_the_same_run_id_with_another_body_is_a_conflict(store: InMemoryStore) -> None:
    admit = admitter(store)
    await admit.admit(a_context("r1"), body_digest="d", new_messages=[])
    with pytest.raises(Conflict) as refused:
        await admit.admit(a_context("r1"), body_digest="other", new_messages=[])
    assert refused.value.code == "run_id_conflict"


async def test_another_run_on_a_busy_thread_is_refused(store: InMemoryStore) -> None:
    admit = admitter(store)
    await admit.admit(a_context("r1"), body_digest="d", new_messages=[])
    with pytest.raises(Conflict) as refused:
        await admit.admit(a_context("r2"), body_digest="d", new_messages=[a_message("m2")])
    assert refused.value.code == "thread_busy"
    assert await store.runs.get_run("t", "r2") is None


async def test_with_the_stream_down_nothing_is_stored_not_even_the_thread(store: InMemoryStore) -> None:
    # WHEN a run on a new thread is admitted while the event stream cannot be reached
    with pytest.raises(ServiceUnavailable):
        await admitter(store, StreamDown()).admit(a_context("r1"), body_digest="d", new_messages=[a_message("m1")])
    # THEN neither the run nor the thread its claim created exists
    assert await store.runs.get_run("t", "r1") is None
    with pytest.raises(NotFound):
        await store.threads.get_thread(USER, "th")


async def test_a_settle_that_refuses_leaves_an_existing_thread_free(store: InMemoryStore) -> None:
    # GIVEN a thread with an ended run on it
    admit = admitter(store)
    await admit.admit(a_context("r1"), body_digest="d", new_messages=[])
    await store.threads.release_thread("t", "th", "r1")

    # WHEN the next run's messages are refused by the reconciling step between admission's two steps
    claim = await admit.claim(a_context("r2"), body_digest="d", new_messages=[a_message("m2")], read_recent=True)
    assert isinstance(claim, Claim)
    with pytest.raises(InvalidRequest):
        await admit.refuse(claim, InvalidRequest("no pending tool call", code="unknown_tool_call"))
    # THEN nothing was stored and the thread is free for the next run
    assert await store.runs.get_run("t", "r2") is None
    assert (await store.threads.get_thread(USER, "th")).active_run_id is None
