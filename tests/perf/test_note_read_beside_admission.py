"""The memory note read beside admission and the first window served from admission's read: one note read and one
history read in all for a turn. That a note is never used for another run is behaviour, tested in
tests/unit/test_worker_prefetch.py."""

from __future__ import annotations

from tests.support.scripted_model import Turn
from tests.support.worker_rig import NOTE, Notes, rig, start


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
