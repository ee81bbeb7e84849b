"""The local feed: a run's entries as its emitter wrote them, and when its readers must go back to the stream."""

from __future__ import annotations

import asyncio

from shared.ports import StreamEntry
from shared.runs.local_feed import RunFeed


def entry(entry_id: str, kind: str = "TEXT_MESSAGE_CONTENT") -> StreamEntry:
    return StreamEntry(id=entry_id, event={"type": kind}, json=f'{{"type":"{kind}"}}')


def a_feed(*ids: str) -> RunFeed:
    feed = RunFeed()
    for entry_id in ids:
        feed.publish(entry(entry_id))
    return feed


async def test_a_reader_from_the_start_gets_every_entry_in_order() -> None:
    feed = a_feed("5-0", "5-1", "7-0")
    reader = feed.reader("0-0")
    assert reader is not None
    assert [e.id for e in await reader.read(0.1) or []] == ["5-0", "5-1", "7-0"]


async def test_a_reader_after_an_id_gets_what_follows_it_by_stream_order_not_by_text() -> None:
    # "10-0" sorts before "9-0" as text; as stream ids it comes after
    feed = a_feed("9-0", "9-1", "10-0", "10-2")
    reader = feed.reader("9-1")
    assert reader is not None
    assert [e.id for e in await reader.read(0.1) or []] == ["10-0", "10-2"]
    between = feed.reader("10-1")  # an id the feed does not hold: what follows it
    assert between is not None
    assert [e.id for e in await between.read(0.1) or []] == ["10-2"]


async def test_a_waiting_reader_wakes_on_the_next_entry_and_times_out_to_an_empty_list() -> None:
    feed = a_feed("1-0")
    reader = feed.reader("1-0")
    assert reader is not None
    assert await reader.read(0.02) == []  # nothing new: a silent stretch (the response pings)
    waiting = asyncio.create_task(reader.read(5.0))
    await asyncio.sleep(0.01)
    feed.publish(entry("2-0"))
    assert [e.id for e in await asyncio.wait_for(waiting, 1.0) or []] == ["2-0"]


async def test_a_closed_feed_hands_out_what_is_left_then_sends_the_reader_to_the_stream() -> None:
    feed = a_feed("1-0", "2-0")
    reader = feed.reader("0-0")
    assert reader is not None
    feed.close()  # the run ended here without a terminal event of this process (a takeover, say)
    assert [e.id for e in await reader.read(0.1) or []] == ["1-0", "2-0"]
    assert await reader.read(0.1) is None
    feed.publish(entry("3-0"))  # nothing is added after the close
    assert await reader.read(0.1) is None


async def test_a_feed_given_up_sends_every_reader_to_the_stream_even_with_entries_unread() -> None:
    feed = a_feed("1-0")
    reader = feed.reader("0-0")
    assert reader is not None
    waiting = asyncio.create_task(feed.reader("1-0").read(5.0))  # type: ignore[union-attr]
    await asyncio.sleep(0.01)
    feed.give_up()  # a write failed: the stream reader handles the outage (grace period, stream_unavailable)
    assert await asyncio.wait_for(waiting, 1.0) is None
    assert await reader.read(0.1) is None
    assert feed.reader("0-0") is None


async def test_a_run_longer_than_the_limit_is_followed_on_the_stream() -> None:
    feed = RunFeed(limit=3)
    for i in range(3):
        feed.publish(entry(f"{i + 1}-0"))
    reader = feed.reader("0-0")
    assert reader is not None
    feed.publish(entry("4-0"))
    assert feed.usable is False
    assert await reader.read(0.1) is None


async def test_a_cursor_that_is_no_stream_id_is_left_to_the_stream_reader() -> None:
    assert a_feed("1-0").reader("not-an-id") is None
