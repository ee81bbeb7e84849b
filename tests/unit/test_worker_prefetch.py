"""What the worker reads before the model request, beside admission rather than after it: the memory note (read
while the thread is claimed) and the first context window (served from what admission read and stored)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from shared.adapters.in_memory.store import InMemoryStore
from shared.adapters.in_memory.stream import InMemoryEventStream
from shared.errors import Conflict
from shared.executors.context import RunContext
from shared.executors.worker import WorkerExecutor
from shared.models import ExecutionMeta, Identity, Message, Origin, Role
from shared.profiles import default_catalog
from shared.runs.service import RunService
from shared.tools.registry import ToolRegistry
from tests.support.scripted_model import ScriptedModel, Turn

USER = Identity(tenant_id="t1", user_id="u1")
NOTE = "Known about the user: likes green tea."


class Notes:
    """A MemoryReader that counts its reads, can fail its first ones, and says when a read has ended."""

    def __init__(self, failures: int = 0) -> None:
        self.calls = 0
        self.failures = failures
        self.finished = 0

    async def note(self, identity: Identity, query: str, *, limit: int) -> str:
        self.calls += 1
        try:
            await asyncio.sleep(0.01)
            if self.calls <= self.failures:
                raise ConnectionError("memory store unreachable")
            return NOTE
        finally:
            self.finished += 1


class CountingStore(InMemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.read_backs = 0

    async def read_back(self, tenant_id: str, thread_id: str, *, before_seq: int | None, limit: int) -> list[Message]:
        self.read_backs += 1
        return await super().read_back(tenant_id, thread_id, before_seq=before_seq, limit=limit)


def context(run_id: str, text: str) -> RunContext:
    return RunContext(
        identity=USER,
        thread_id="th-1",
        run_id=run_id,
        profile=default_catalog().get("chat_default"),
        meta=ExecutionMeta(origin=Origin.CHAT),
        latest_user_text=text,
    )


async def keep(fresh: list[Message], recent: list[Message]) -> list[Message]:
    """The chat run's ``settle`` with no pending front-end call: store the new messages as they are."""
    return fresh


async def start(runs: RunService, worker: WorkerExecutor, run_id: str, text: str) -> Any:
    message = Message(id=f"m-{run_id}", thread_id="th-1", role=Role.USER, content=text)
    return await runs.admit(
        context(run_id, text), body_digest=run_id, new_messages=[message], executor=worker, settle=keep
    )


def rig(notes: Notes, *turns: Turn) -> tuple[CountingStore, ScriptedModel, RunService, Any]:
    store = CountingStore()
    model = ScriptedModel(*turns)
    runs = RunService(store, InMemoryEventStream())
    return store, model, runs, lambda: WorkerExecutor(model, store, store, ToolRegistry(), memories=notes)


async def test_the_note_is_read_beside_admission_and_the_first_window_needs_no_read() -> None:
    notes = Notes()
    store, model, runs, worker = rig(notes, Turn(text=["Sure."]), Turn(text=["Tea."]))
    await start(runs, worker(), "run-1", "hello")
    await runs.wait_idle()
    store.read_backs = 0
    # WHEN the second turn of the thread runs
    await start(runs, worker(), "run-2", "what should I drink?")
    await runs.wait_idle()
    # THEN the note was read once, before the model request, and reached the model with the newest message
    assert notes.calls == 2 and notes.finished == 2
    newest = model.requests[-1].messages[-1]
    assert NOTE in str(newest.content) and "what should I drink?" in str(newest.content)
    # and the window (the earlier turn included) came from admission's own read: one read_back in all
    assert store.read_backs == 1
    assert [m.content for m in model.requests[-1].messages[1:3]] == ["hello", "Sure."]


async def test_a_note_that_could_not_be_read_beside_admission_is_read_again() -> None:
    notes = Notes(failures=1)
    _store, model, runs, worker = rig(notes, Turn(text=["Tea."]))
    await start(runs, worker(), "run-1", "what should I drink?")
    await runs.wait_idle()
    assert notes.calls == 2
    assert NOTE in str(model.requests[-1].messages[-1].content)


async def test_a_refused_run_leaves_no_read_running() -> None:
    notes = Notes()
    _store, _model, runs, worker = rig(notes, Turn(text=["..."], delay_s=0.5))
    await start(runs, worker(), "run-1", "hello")  # holds the thread
    # WHEN a second run on the same thread is refused
    with pytest.raises(Conflict):
        await start(runs, worker(), "run-2", "me too")
    # THEN its note read had already ended when the refusal came back (nothing runs after the response)
    assert notes.calls == 2 and notes.finished == 2
    await runs.wait_idle()


async def test_a_note_read_for_another_run_is_never_used() -> None:
    notes = Notes()
    _store, model, runs, worker = rig(notes, Turn(text=["Tea."]))
    executor = worker()
    await executor.prefetch(context("run-other", "a message of another run"))
    notes_before = notes.calls
    await start(runs, executor, "run-1", "what should I drink?")
    await runs.wait_idle()
    # the run read its own note: the one read for another run id was dropped
    assert notes.calls == notes_before + 1
    assert NOTE in str(model.requests[-1].messages[-1].content)
