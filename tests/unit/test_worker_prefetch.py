"""What the worker reads before the model request, beside admission rather than after it: the memory note (read
while the thread is claimed) and the first context window (served from what admission read and stored)."""

from __future__ import annotations

import pytest

from shared.errors import Conflict
from tests.support.scripted_model import Turn
from tests.support.worker_rig import NOTE, Notes, context, rig, start


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
    # GIVEN an executor that gave another run a head start (a note read for it), and the run's own read beside
    # admission fails
    notes = Notes(failing_calls=frozenset({2}), about_query=True)
    _store, model, runs, worker = rig(notes, Turn(text=["Tea."]))
    executor = worker()
    await executor.head_start(context("run-other", "a message of another run")).read()
    # WHEN a run starts on that executor
    await start(runs, executor, "run-1", "what should I drink?")
    await runs.wait_idle()
    # THEN the run read its own note again, and the one read for the other run never reached the model
    assert notes.calls == 3
    sent = "\n".join(str(m.content) for m in model.requests[-1].messages)
    assert "Read for: what should I drink?" in sent
    assert "a message of another run" not in sent
