"""The first model request of a chat run leaves while admission stores the run (shared/executors/head_start.py),
and never outlives a refusal: a request sent ahead of a run that is then refused, or attached to, is closed; one
that turns out different from what the stored run needs is closed and sent again."""

from __future__ import annotations

import pytest

from shared.adapters.in_memory.store import MAX_CONTENT_CHARS
from shared.errors import Conflict, ServiceUnavailable
from shared.stream_keys import run_stream_key
from tests.support.request_ahead_rig import SLOW_MODEL_S, Rig
from tests.support.scripted_model import Turn
from tests.support.worker_rig import USER

"""How long admission's write takes here: long enough that a request sent after it could not be mistaken."""
"""A model still thinking when a request sent ahead is closed (the stream is read as it arrives)."""


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
    run = await rig.store.runs.get_run(USER.tenant_id, "run-1")
    assert run is not None and run.status.value == "cancelled", run


async def test_a_run_refused_at_the_write_closes_the_request_sent_ahead_and_leaves_nothing() -> None:
    rig = Rig(Turn(text=["never read"], delay_s=SLOW_MODEL_S))
    rig.store.fail = True
    with pytest.raises(ServiceUnavailable):
        await rig.admit("run-1", "hi")
    # THEN the request sent ahead was closed before the refusal was answered, and nothing was written
    assert (len(rig.model.requests), rig.model.closed_early, rig.model.read_through) == (1, 1, 0)
    assert await rig.store.runs.get_run(USER.tenant_id, "run-1") is None
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
