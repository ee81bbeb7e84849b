"""The cost of one event: one stream round trip (run and thread entries pipelined), its JSON encoded once from the
emitter to the SSE frames, and no work that grows with the answer so far."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from ag_ui.core import (
    RunFinishedEvent,
    StepStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
)

from functions.agent_api.sse import frames
from shared.adapters.in_memory.stream import InMemoryEventStream
from shared.executors.model_turn import ModelTurn
from shared.llm.types import ChatRequest
from shared.models import ExecutionMeta
from shared.ports import StreamEntry
from shared.run_events.emitter import RunEmitter, run_started
from tests.support.scripted_model import ScriptedModel, Turn


class CountingStream(InMemoryEventStream):
    def __init__(self) -> None:
        super().__init__()
        self.round_trips: list[list[str]] = []

    async def append(self, key: str, event: dict[str, Any]) -> str:
        self.round_trips.append([key])
        return await super().append(key, event)

    async def append_batch(self, entries: Any, *, clear: str | None = None) -> list[str]:
        self.round_trips.append([key for key, _ in entries])
        return await super().append_batch(entries, clear=clear)


async def test_each_event_is_one_round_trip_carrying_its_run_and_thread_entries() -> None:
    stream = CountingStream()
    emitter = RunEmitter(stream, "run:{t/r}:events", thread_key="thread:{t/th}:events", run_id="r")
    for i in range(5):
        await emitter.emit(TextMessageContentEvent(message_id="m", delta=f"d{i}"))
    assert stream.round_trips == [["run:{t/r}:events", "thread:{t/th}:events"]] * 5
    assert len(await stream.read_after("thread:{t/th}:events", "0-0", block_ms=0)) == 5


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


class EncodeCounter:
    """Counts JSON encodings of whole events (a dict with a ``type``) through ``json.dumps``, wherever made."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.events = 0
        real = json.dumps

        def counting(value: Any, *args: Any, **kwargs: Any) -> str:
            if isinstance(value, dict) and "type" in value:
                self.events += 1
            return real(value, *args, **kwargs)

        monkeypatch.setattr(json, "dumps", counting)


@pytest.fixture(params=["memory", "redis"])
async def event_stream(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """The in-memory stream, and a redis-server (its client encodes nothing again on the way)."""
    if request.param == "memory":
        yield InMemoryEventStream()
        return
    from shared.adapters.redis_stream import RedisEventStream, connect

    stream = RedisEventStream(connect(request.getfixturevalue("redis_url"), cluster=False))
    yield stream
    await stream.close()


async def test_each_event_is_encoded_once_from_the_emitter_to_the_sse_frames_of_both_streams(
    event_stream: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a run that emits its start (with metadata), text and its end, to its run and thread streams
    counter = EncodeCounter(monkeypatch)
    run_key, thread_key = "run:{t/r}:events", "thread:{t/th}:events"
    emitter = RunEmitter(event_stream, run_key, thread_key=thread_key, run_id="r")
    events = [
        run_started("th", "r", ExecutionMeta()),
        TextMessageStartEvent(message_id="m"),
        *(TextMessageContentEvent(message_id="m", delta=f"字 {i}") for i in range(3)),
        TextMessageEndEvent(message_id="m"),
        RunFinishedEvent(thread_id="th", run_id="r"),
    ]
    for event in events:
        await emitter.emit(event)
    # WHEN both streams are read back and framed for SSE
    run_entries = await event_stream.read_after(run_key, "0-0", block_ms=0)
    thread_entries = await event_stream.read_after(thread_key, "0-0", block_ms=0)
    run_frames = [f async for f in frames(_iterate(run_entries))]
    thread_frames = [f async for f in frames(_iterate(thread_entries))]
    # THEN every event was encoded exactly once, for both streams and every frame
    assert counter.events == len(events)
    # AND the frames carry the events: the run stream's without runId, the thread stream's with it
    sent = [json.loads(f.split("data: ", 1)[1]) for f in run_frames]
    tagged = [json.loads(f.split("data: ", 1)[1]) for f in thread_frames]
    assert [e["type"] for e in sent] == [e.type.value for e in events]
    assert [e.get("delta") for e in sent][2:5] == ["字 0", "字 1", "字 2"]
    assert "metadata" not in sent[1] and sent[0]["metadata"]["origin"] == "chat"
    assert all(e["metadata"]["runId"] == "r" for e in tagged)
    assert tagged[0]["metadata"] == {**sent[0]["metadata"], "runId": "r"}
    assert [{k: v for k, v in e.items() if k != "metadata"} for e in tagged] == [
        {k: v for k, v in e.items() if k != "metadata"} for e in sent
    ]
    assert all(f.startswith(f"id: {entry.id}\n") for f, entry in zip(run_frames, run_entries, strict=True))


async def _iterate(entries: list[StreamEntry]) -> AsyncIterator[StreamEntry | None]:
    for entry in entries:
        yield entry
