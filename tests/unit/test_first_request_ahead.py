"""The first model request of a chat run leaves while admission stores the run (shared/executors/opened_turn.py),
and never outlives a refusal: a request sent ahead of a run that is then refused, or attached to, is closed; one
that turns out different from what the stored run needs is closed and sent again."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from shared.adapters.in_memory.store import MAX_CONTENT_CHARS, InMemoryStore
from shared.adapters.in_memory.stream import InMemoryEventStream
from shared.errors import Conflict, ServiceUnavailable
from shared.executors.worker import WorkerExecutor
from shared.llm.types import ChatChunk, ChatRequest
from shared.models import Identity, Message, Role, Run
from shared.ports.store import AdmittedRun
from shared.runs.service import RunService
from shared.stream_keys import run_stream_key
from shared.tools.registry import ToolRegistry
from tests.support.scripted_model import ScriptedModel, Turn
from tests.unit.test_worker_prefetch import USER, context, keep

WRITE_S = 0.05
"""How long admission's write takes here: long enough that a request sent after it could not be mistaken."""
SLOW_MODEL_S = 1.0
"""A model still thinking when a request sent ahead is closed (the stream is read as it arrives)."""


class SlowWrite(InMemoryStore):
    """Admission's write (messages and run record) takes ``WRITE_S``, or fails after it."""

    def __init__(self) -> None:
        super().__init__()
        self.written_at: list[float] = []
        self.fail = False

    async def admit_messages(
        self, identity: Identity, thread_id: str, messages: Sequence[Message], run: Run, *, last_seq: int
    ) -> AdmittedRun:
        await asyncio.sleep(WRITE_S)
        if self.fail:
            raise ConnectionError("the store went away")
        try:
            return await super().admit_messages(identity, thread_id, messages, run, last_seq=last_seq)
        finally:
            self.written_at.append(time.monotonic())


class Watched(ScriptedModel):
    """Records when each request left and whether its stream was read to the end or closed before."""

    def __init__(self, *turns: Turn) -> None:
        super().__init__(*turns)
        self.sent_at: list[float] = []
        self.ended_at: list[float] = []
        self.closed_early = 0
        self.read_through = 0

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatChunk]:
        self.sent_at.append(time.monotonic())
        ended = False
        try:
            async for chunk in super().stream(request):
                yield chunk
            ended = True
        finally:
            self.ended_at.append(time.monotonic())
            if ended:
                self.read_through += 1
            else:
                self.closed_early += 1


class Rig:
    def __init__(self, *turns: Turn) -> None:
        self.store = SlowWrite()
        self.stream = InMemoryEventStream()
        self.model = Watched(*turns)
        self.runs = RunService(self.store, self.stream)

    async def admit(self, run_id: str, text: str, *, digest: str | None = None, message_id: str | None = None) -> Any:
        message = Message(id=message_id or f"m-{run_id}", thread_id="th-1", role=Role.USER, content=text)
        worker = WorkerExecutor(self.model, self.store, self.store, ToolRegistry())
        return await self.runs.admit(
            context(run_id, text), body_digest=digest or run_id, new_messages=[message], executor=worker, settle=keep
        )

    async def answer(self, run_id: str) -> str:
        events = [e.event async for e in self.runs.tail_run(USER.tenant_id, run_id) if e is not None]
        await self.runs.wait_idle()
        assert events[-1]["type"] == "RUN_FINISHED", events
        return "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")


async def test_the_first_model_request_leaves_before_the_run_is_stored() -> None:
    rig = Rig(Turn(text=["Hello."]))
    await rig.admit("run-1", "hi")
    assert await rig.answer("run-1") == "Hello."
    # THEN the request left while the write was in flight (one round trip sooner), and it is the stream the run
    # read: one request only, read to its end
    assert rig.model.sent_at[0] < rig.store.written_at[0]
    assert (len(rig.model.requests), rig.model.read_through, rig.model.closed_early) == (1, 1, 0)
    assert rig.model.requests[0].messages[-1].content == "hi"


async def test_the_request_sent_ahead_is_read_as_the_model_sends_it_not_when_the_turn_gets_to_it() -> None:
    # GIVEN a model that answers at once, and a write that takes longer than the answer
    rig = Rig(Turn(text=["Hello", " there", "."]))
    await rig.admit("run-1", "hi")
    assert await rig.answer("run-1") == "Hello there."
    # THEN the answer was read to its end (the response closed, its connection free again) before the run was even
    # stored, and the turn then streamed it from what was read
    assert rig.model.ended_at[0] < rig.store.written_at[0]
    assert rig.model.read_through == 1


async def test_cancelling_a_run_closes_the_request_it_sent_ahead() -> None:
    rig = Rig(Turn(text=["one", " two", " three", " four"], delay_s=0.1))
    await rig.admit("run-1", "hi")
    seen: list[str] = []
    async for entry in rig.runs.tail_run(USER.tenant_id, "run-1"):
        if entry is None:
            continue
        seen.append(entry.event["type"])
        if entry.event["type"] == "TEXT_MESSAGE_CONTENT" and "cancelled" not in seen:
            seen.append("cancelled")
            await rig.runs.cancel(USER, "run-1")
    await rig.runs.wait_idle()
    # THEN the model's stream was closed before its end, and the run ended as cancelled
    assert (rig.model.closed_early, rig.model.read_through) == (1, 0)
    run = await rig.store.get_run(USER.tenant_id, "run-1")
    assert run is not None and run.status.value == "cancelled", run


async def test_a_run_refused_at_the_write_closes_the_request_sent_ahead_and_leaves_nothing() -> None:
    rig = Rig(Turn(text=["never read"], delay_s=SLOW_MODEL_S))
    rig.store.fail = True
    with pytest.raises(ServiceUnavailable):
        await rig.admit("run-1", "hi")
    # THEN the request sent ahead was closed before the refusal was answered, and nothing was written
    assert (len(rig.model.requests), rig.model.closed_early, rig.model.read_through) == (1, 1, 0)
    assert await rig.store.get_run(USER.tenant_id, "run-1") is None
    assert await rig.stream.read_after(run_stream_key(USER.tenant_id, "run-1"), "0-0", block_ms=0) == []


async def test_a_conflicting_run_id_is_409_and_its_request_ahead_is_closed() -> None:
    rig = Rig(Turn(text=["first"]), Turn(text=["never read"], delay_s=SLOW_MODEL_S))
    await rig.admit("run-1", "hi")
    assert await rig.answer("run-1") == "first"
    # WHEN the same run id comes back with another body (a new message)
    with pytest.raises(Conflict):
        await rig.admit("run-1", "something else", digest="another body", message_id="m-other")
    # THEN the request sent ahead for it was closed, and the stored run's events are untouched
    assert (len(rig.model.requests), rig.model.read_through, rig.model.closed_early) == (2, 1, 1)
    assert await rig.answer("run-1") == "first"


async def test_a_retry_of_a_stored_run_sends_nothing_ahead() -> None:
    rig = Rig(Turn(text=["once"]))
    await rig.admit("run-1", "hi")
    assert await rig.answer("run-1") == "once"
    # WHEN the client retries the same request (same run id, same message)
    again = await rig.admit("run-1", "hi")
    # THEN it attaches; its message is already stored, so no request was sent ahead
    assert not again.created
    assert len(rig.model.requests) == 1


async def test_a_first_request_that_differs_from_the_one_sent_ahead_is_sent_again() -> None:
    # GIVEN a message longer than the store keeps (it is stored cut, so the window differs from the guess)
    rig = Rig(Turn(text=["never read"], delay_s=SLOW_MODEL_S), Turn(text=["Answered."]))
    long_text = "x" * (MAX_CONTENT_CHARS + 10)
    await rig.admit("run-1", long_text)
    assert await rig.answer("run-1") == "Answered."
    # THEN the request sent ahead (with the whole text) was closed and the one for the stored message sent
    first, second = rig.model.requests
    assert len(first.messages[-1].content) == MAX_CONTENT_CHARS + 10
    assert len(second.messages[-1].content) == MAX_CONTENT_CHARS
    assert (rig.model.closed_early, rig.model.read_through) == (1, 1)


async def test_without_the_memory_note_nothing_is_sent_ahead() -> None:
    class FailingNotes:
        def __init__(self) -> None:
            self.calls = 0

        async def note(self, identity: Identity, query: str, *, limit: int) -> str:
            self.calls += 1
            if self.calls == 1:
                raise ConnectionError("memory store unreachable")
            return "Known about the user: likes tea."

    rig = Rig(Turn(text=["Hello."]))
    notes = FailingNotes()
    message = Message(id="m-1", thread_id="th-1", role=Role.USER, content="hi")
    worker = WorkerExecutor(rig.model, rig.store, rig.store, ToolRegistry(), memories=notes)
    await rig.runs.admit(context("run-1", "hi"), body_digest="d", new_messages=[message], executor=worker, settle=keep)
    assert await rig.answer("run-1") == "Hello."
    # THEN the request waited for the run to be stored and the note read again: it carries the note
    assert rig.model.sent_at[0] > rig.store.written_at[0]
    assert len(rig.model.requests) == 1 and notes.calls == 2
    assert "likes tea" in rig.model.requests[0].messages[-1].content
