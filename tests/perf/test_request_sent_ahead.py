"""When the first model request of a chat run leaves: while admission stores the run (one round trip sooner), read as
the model sends it, and only once the run is stored when the memory note was not read beside admission. That such a
request never outlives a refusal is behaviour, tested in tests/unit/test_first_request_ahead.py."""

from __future__ import annotations

from shared.executors.worker import WorkerExecutor
from shared.models import Identity, Message, Role
from shared.tools.registry import ToolRegistry
from tests.support.request_ahead_rig import Rig
from tests.support.scripted_model import Turn
from tests.support.worker_rig import context


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
    worker = WorkerExecutor(rig.model, rig.store.threads, rig.store.audit, ToolRegistry(), memories=notes)
    await rig.runs.admit(
        context("run-1", "hi"), body_digest="d", new_messages=[message], executor=worker, reconcile=True
    )
    assert await rig.answer("run-1") == "Hello."
    # THEN the request waited for the run to be stored and the note read again: it carries the note
    assert rig.model.sent_at[0] > rig.store.written_at[0]
    assert len(rig.model.requests) == 1 and notes.calls == 2
    assert "likes tea" in rig.model.requests[0].messages[-1].content
