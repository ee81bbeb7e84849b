"""The cost of one event: one stream round trip and one stored entry (a visible run's, on its thread's stream; a
hidden run's lifecycle event also on its thread's, in the same pipeline), and no work that grows with the answer
so far."""

from __future__ import annotations

from typing import Any

from ag_ui.core import (
    StepStartedEvent,
    TextMessageContentEvent,
)

from shared.adapters.in_memory.stream import InMemoryEventStream
from shared.executors.model_turn import ModelTurn
from shared.llm.types import ChatRequest
from shared.run_events.emitter import RunEmitter
from tests.support.scripted_model import ScriptedModel, Turn


class CountingStream(InMemoryEventStream):
    def __init__(self) -> None:
        super().__init__()
        self.round_trips: list[list[str]] = []

    async def append(self, key: str, event: dict[str, Any]) -> str:
        self.round_trips.append([key])
        return await super().append(key, event)

    async def append_batch(self, entries: Any, *, clear: str | None = None, encoded: Any = None) -> list[str]:
        self.round_trips.append([key for key, _ in entries])
        return await super().append_batch(entries, clear=clear, encoded=encoded)


async def test_each_event_of_a_visible_run_is_one_entry_on_its_thread_stream_only() -> None:
    stream = CountingStream()
    emitter = RunEmitter(stream, "run:{t/r}:events", thread_key="thread:{t/th}:events", run_id="r")
    for i in range(5):
        await emitter.emit(TextMessageContentEvent(message_id="m", delta=f"d{i}"))
    assert stream.round_trips == [["thread:{t/th}:events"]] * 5
    entries = await stream.read_after("thread:{t/th}:events", "0-0", block_ms=0)
    assert [e.event["metadata"] for e in entries] == [{"runId": "r"}] * 5
    assert await stream.read_after("run:{t/r}:events", "0-0", block_ms=0) == []
    assert emitter.last_id == entries[-1].id


async def test_a_hidden_run_keeps_its_events_in_its_run_stream_and_shows_only_its_lifecycle_on_the_thread() -> None:
    stream = CountingStream()
    emitter = RunEmitter(stream, "run:{t/r}:events", thread_key="thread:{t/th}:events", run_id="r", hidden=True)
    await emitter.emit(StepStartedEvent(step_name="memory"))
    await emitter.emit(TextMessageContentEvent(message_id="m", delta="secret"))
    assert stream.round_trips == [["run:{t/r}:events", "thread:{t/th}:events"], ["run:{t/r}:events"]]
    on_thread = await stream.read_after("thread:{t/th}:events", "0-0", block_ms=0)
    assert [e.event["type"] for e in on_thread] == ["STEP_STARTED"]


async def test_a_deferred_event_goes_out_with_the_next_one_and_a_new_run_clears_stale_entries_first() -> None:
    stream = CountingStream()
    await stream.append("run:{t/r}:events", {"type": "TEXT_MESSAGE_CONTENT", "delta": "stale"})
    stream.round_trips.clear()
    emitter = RunEmitter(stream, "run:{t/r}:events", run_id="r", clear_run_stream=True)
    await emitter.emit(StepStartedEvent(step_name="worker"), defer=True)
    assert stream.round_trips == []
    await emitter.emit(TextMessageContentEvent(message_id="m", delta="fresh"))
    assert stream.round_trips == [["run:{t/r}:events", "run:{t/r}:events"]]
    entries = await stream.read_after("run:{t/r}:events", "0-0", block_ms=0)
    assert [e.event["type"] for e in entries] == ["STEP_STARTED", "TEXT_MESSAGE_CONTENT"]


async def test_the_answer_is_collected_in_parts_and_joined_once() -> None:
    # GIVEN a model that streams an answer in many deltas
    deltas = [f"w{i} " for i in range(2_000)]
    stream = CountingStream()
    turn = ModelTurn(RunEmitter(stream, "run:{t/r}:events", run_id="r"))
    await turn.run(ScriptedModel(Turn(text=deltas)), ChatRequest(model="m", messages=()))
    # THEN no delta copied the answer so far: the parts are kept as they came, and joined when read
    assert len(turn.result.text_parts) == len(deltas)
    assert turn.result.text == "".join(deltas)
    assert turn.result.text_parts == ["".join(deltas)]
