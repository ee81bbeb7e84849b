"""Coalesced deltas on a real redis-server (``shared.run_events.coalescing`` through ``RunEmitter``): the client
sees exactly the model's text and arguments, multi-byte characters included, no delta is ever split, the first
delta of a message is written at once, and whatever waits is written before any other kind of event."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from ag_ui.core import (
    BaseEvent,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    StateDeltaEvent,
    StepFinishedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)
from ag_ui.core.events import Interrupt

from shared.adapters.redis_stream import RedisEventStream, connect
from shared.run_events.coalescing import Coalescing
from shared.run_events.emitter import RunEmitter

RUN_KEY, THREAD_KEY = "run:{t/r1}:events", "thread:{t/th}:events"
WINDOW = Coalescing(window_s=0.05, max_chars=64)
# Multi-byte text: CJK, emoji (4 bytes in UTF-8, 2 UTF-16 units), a flag (two code points), combining accents.
DELTAS = ["Hé", "llo ", "世界", "! 👋", "🇫🇷", " café", "́", " naïve", " ok", "—", "✓", " 終わり", "."] * 4


@pytest.fixture
async def stream(redis_url: str) -> AsyncIterator[RedisEventStream]:
    redis = RedisEventStream(connect(redis_url, cluster=False))
    await redis.delete([RUN_KEY, THREAD_KEY])
    yield redis
    await redis.close()


def an_emitter(stream: RedisEventStream, coalescing: Coalescing | None = WINDOW) -> RunEmitter:
    return RunEmitter(stream, RUN_KEY, thread_key=THREAD_KEY, run_id="r1", coalescing=coalescing)


async def stored(stream: RedisEventStream) -> list[dict[str, Any]]:
    return [e.event for e in await stream.read_after(THREAD_KEY, "0-0", block_ms=0, count=10_000)]


def assert_whole_deltas(sent: list[str], written: list[str]) -> None:
    """Every written delta is a run of consecutive sent deltas (a delta is never split), in order, and together
    they are the sent text exactly."""
    assert "".join(written) == "".join(sent)
    sent_cuts, at = {0}, 0
    for delta in sent:
        at += len(delta)
        sent_cuts.add(at)
    written_cuts, at = set(), 0
    for delta in written:
        at += len(delta)
        written_cuts.add(at)
    assert written_cuts <= sent_cuts


async def test_batched_text_is_exactly_the_models_text_with_multibyte_characters_and_no_split_delta(
    stream: RedisEventStream,
) -> None:
    emitter = an_emitter(stream)
    # GIVEN a model streaming 52 deltas, 10 ms apart
    await emitter.emit(TextMessageStartEvent(message_id="m1", role="assistant"))
    for delta in DELTAS:
        await emitter.emit(TextMessageContentEvent(message_id="m1", delta=delta))
        await asyncio.sleep(0.01)
    await emitter.emit(TextMessageEndEvent(message_id="m1"))
    # THEN the stream holds fewer, larger deltas that are the same text, byte for byte, and cut only between deltas
    events = await stored(stream)
    written = [e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT"]
    assert_whole_deltas(DELTAS, written)
    assert len(written) < len(DELTAS) / 2, len(written)
    assert all(len(d) <= WINDOW.max_chars for d in written[1:])  # the batches are capped
    assert [e["type"] for e in events][-1] == "TEXT_MESSAGE_END"
    assert {e["metadata"]["runId"] for e in events} == {"r1"}


async def test_tool_call_argument_deltas_are_joined_into_the_exact_arguments(stream: RedisEventStream) -> None:
    emitter = an_emitter(stream)
    arguments = '{"city": "Zürich", "note": "日本語 🙂", "n": [1, 2, 3]}'
    parts = [arguments[i : i + 3] for i in range(0, len(arguments), 3)]
    await emitter.emit(ToolCallStartEvent(tool_call_id="c1", tool_call_name="lookup", parent_message_id="m1"))
    for part in parts:
        await emitter.emit(ToolCallArgsEvent(tool_call_id="c1", delta=part))
    await emitter.emit(ToolCallEndEvent(tool_call_id="c1"))
    events = await stored(stream)
    written = [e["delta"] for e in events if e["type"] == "TOOL_CALL_ARGS"]
    assert_whole_deltas(parts, written)
    assert len(written) == 2  # the first delta at once, the rest in one batch
    assert [e["type"] for e in events] == ["TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_ARGS", "TOOL_CALL_END"]


async def test_the_first_delta_of_each_message_is_written_at_once_and_a_later_one_within_its_window(
    stream: RedisEventStream,
) -> None:
    emitter = an_emitter(stream, Coalescing(window_s=0.2, max_chars=2048))
    # WHEN the first delta of a message is emitted
    entry_id = await emitter.emit(TextMessageContentEvent(message_id="m1", delta="first"))
    # THEN it is on the stream when emit returns, not a window later
    assert entry_id is not None
    assert [e["delta"] for e in await stored(stream)] == ["first"]
    # AND a second one waits for its window (or the next other event), then goes out without being asked
    assert await emitter.emit(TextMessageContentEvent(message_id="m1", delta=" second")) is None
    assert len(await stored(stream)) == 1
    await asyncio.sleep(0.3)
    assert [e["delta"] for e in await stored(stream)] == ["first", " second"]
    # AND the first delta of the next message goes out at once too
    assert await emitter.emit(TextMessageContentEvent(message_id="m2", delta="next")) is not None


OTHER_EVENTS: dict[str, BaseEvent] = {
    "message end": TextMessageEndEvent(message_id="m1"),
    "tool start": ToolCallStartEvent(tool_call_id="c9", tool_call_name="t", parent_message_id="m1"),
    "tool result": ToolCallResultEvent(message_id="tm", tool_call_id="c0", content="x", role="tool"),
    "state delta": StateDeltaEvent(delta=[{"op": "add", "path": "/a", "value": 1}]),
    "step end": StepFinishedEvent(step_name="worker"),
    "interrupt": RunFinishedEvent(
        thread_id="th",
        run_id="r1",
        outcome=RunFinishedInterruptOutcome(interrupts=[Interrupt(id="i1", reason="tool_approval")]),
    ),
    "cancel": RunFinishedEvent(thread_id="th", run_id="r1", outcome=RunFinishedCancelledOutcome()),
    "run end": RunFinishedEvent(thread_id="th", run_id="r1"),
    "error": RunErrorEvent(message="The run failed.", code="run_failed"),
}


@pytest.mark.parametrize("kind", list(OTHER_EVENTS))
async def test_whatever_waits_is_written_before_any_other_kind_of_event(stream: RedisEventStream, kind: str) -> None:
    # GIVEN a message whose later deltas wait in a long window
    emitter = an_emitter(stream, Coalescing(window_s=5.0, max_chars=2048))
    await emitter.emit(TextMessageContentEvent(message_id="m1", delta="a"))
    await emitter.emit(TextMessageContentEvent(message_id="m1", delta="b"))
    await emitter.emit(TextMessageContentEvent(message_id="m1", delta="c"))
    # WHEN another kind of event comes
    await emitter.emit(OTHER_EVENTS[kind])
    # THEN the waiting deltas went out first, as one event, and the other event right after them
    events = await stored(stream)
    assert [e.get("delta") for e in events[:2]] == ["a", "bc"]
    assert events[2]["type"] == OTHER_EVENTS[kind].type.value and len(events) == 3


async def test_a_flush_at_the_end_of_a_run_writes_what_waits(stream: RedisEventStream) -> None:
    emitter = an_emitter(stream, Coalescing(window_s=5.0, max_chars=2048))
    await emitter.emit(TextMessageContentEvent(message_id="m1", delta="a"))
    await emitter.emit(TextMessageContentEvent(message_id="m1", delta="b"))
    assert await emitter.flush(timeout_s=1.0)
    assert [e["delta"] for e in await stored(stream)] == ["a", "b"]


async def test_without_coalescing_every_delta_is_its_own_event(stream: RedisEventStream) -> None:
    emitter = an_emitter(stream, coalescing=None)
    for delta in DELTAS[:5]:
        await emitter.emit(TextMessageContentEvent(message_id="m1", delta=delta))
    assert [e["delta"] for e in await stored(stream)] == DELTAS[:5]


async def test_every_key_written_expires_within_the_retention(stream: RedisEventStream, redis_url: str) -> None:
    emitter = RunEmitter(stream, RUN_KEY, thread_key=THREAD_KEY, run_id="r1", hidden=True)
    await emitter.emit(StepFinishedEvent(step_name="memory"))
    client = connect(redis_url, cluster=False)
    try:
        for key in (RUN_KEY, THREAD_KEY):
            ttl = await client.ttl(key)
            assert 0 < ttl <= 24 * 3600, (key, ttl)
    finally:
        await client.aclose()
