"""The events of a run that executes in this process, handed to this process's responses that tail the run.

Every event goes to the run's stream (Redis) and every response reads it from there: the stream is how a client
on any instance, or one that reconnects, follows the run. A response that tails a run executing in its own process
(the ``POST /agent`` that started it, nearly always) used to read each event back with a blocking ``XREAD``, one
more Redis round trip per event on the path to the client. It now takes the entries as the emitter wrote them,
ids and JSON text included, so its frames are byte for byte what a read would have returned.

The feed answers only what it knows for certain; otherwise its reader returns None and the response goes on from
its last id on the stream, as before:
- the emitter could not write (the stream is down): everything about outages (the grace period, the terminal
  ``stream_unavailable``) stays with the stream reader;
- the run ended without a terminal event from this process (a takeover closed it elsewhere);
- the run wrote more than ``FEED_LIMIT`` events (the feed keeps all of a run's entries, so it is bounded).
"""

from __future__ import annotations

import asyncio
import bisect

from shared.ports import StreamEntry

FEED_LIMIT = 10_000
"""Entries a feed keeps (as many as a run stream keeps, about); a longer run's readers go on from the stream."""


def _id_key(entry_id: str) -> tuple[int, int]:
    """A stream entry id (``"<ms>-<seq>"``) as a sortable pair."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


class RunFeed:
    """A run's stream entries as its emitter wrote them, in order (only entries that are on the stream)."""

    def __init__(self, limit: int = FEED_LIMIT) -> None:
        self._entries: list[StreamEntry] = []
        self._limit = limit
        self._changed = asyncio.Event()
        self.closed = False
        """No entry will be added: the run's emitter is done (or the feed was given up)."""
        self.usable = True
        """False once the feed cannot vouch for the whole stream: its readers go on from the stream."""

    def publish(self, entry: StreamEntry) -> None:
        """An entry the run's stream now holds (called by the emitter with the id the write returned)."""
        if self.closed:
            return
        if len(self._entries) >= self._limit:
            self.give_up()
            return
        self._entries.append(entry)
        self._wake()

    def give_up(self) -> None:
        """The feed no longer mirrors the stream (a write failed, or too many entries): readers use the stream."""
        self.usable = False
        self.close()

    def close(self) -> None:
        self.closed = True
        self._wake()

    def reader(self, after: str) -> FeedReader | None:
        """A reader of the entries after ``after`` (a stream id, ``"0-0"`` for all); None if the feed cannot tell."""
        if not self.usable:
            return None
        try:
            position = bisect.bisect_right(self._entries, _id_key(after), key=lambda entry: _id_key(entry.id))
        except ValueError:
            return None  # not a stream id: the stream reader says what that means
        return FeedReader(self, position)

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()


class FeedReader:
    """One response's position in a feed."""

    def __init__(self, feed: RunFeed, position: int) -> None:
        self._feed = feed
        self._position = position

    async def read(self, wait_s: float) -> list[StreamEntry] | None:
        """The entries not read yet, waiting up to ``wait_s`` for one ([] if none came); None when the feed cannot
        say more (given up, or closed with nothing left): go on from the stream after the last entry read."""
        feed = self._feed
        if self._position >= len(feed._entries) and not feed.closed:
            changed = feed._changed
            try:
                async with asyncio.timeout(wait_s):
                    await changed.wait()
            except TimeoutError:
                return []
        if not feed.usable:
            return None
        entries = feed._entries[self._position :]
        if not entries:
            return None if feed.closed else []
        self._position += len(entries)
        return entries
