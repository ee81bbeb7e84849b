"""In-memory ``EventStream``: the reference fake that runs the same contract suite as the Redis adapter.

It mirrors the Redis stream semantics the backend relies on: entry ids ``<ms>-<seq>`` that strictly increase per key
(even when the clock stalls or steps back), exclusive ``read_after`` (``"0-0"`` replays everything), a blocking read
that wakes as soon as another task appends, events stored as JSON (so what comes back is what Redis would return),
``MAXLEN``-style trimming that keeps the newest entries, and TTLs. Single event loop only, like an asyncio client.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from shared.event_json import dumps
from shared.ports import StreamEntry

EntryId = tuple[int, int]


def parse_entry_id(entry_id: str) -> EntryId:
    """``"<ms>-<seq>"`` (or a bare ``"<ms>"``, which Redis reads as ``<ms>-0``) as a comparable pair."""
    ms, _, seq = entry_id.partition("-")
    try:
        parsed = (int(ms), int(seq) if seq else 0)
    except ValueError as exc:
        raise ValueError(f"invalid stream entry id: {entry_id!r}") from exc
    if parsed[0] < 0 or parsed[1] < 0:
        raise ValueError(f"invalid stream entry id: {entry_id!r}")
    return parsed


def format_entry_id(entry_id: EntryId) -> str:
    return f"{entry_id[0]}-{entry_id[1]}"


@dataclass
class _Stream:
    entries: deque[tuple[EntryId, str]] = field(default_factory=deque)
    last_id: EntryId = (0, 0)
    expires_at: float | None = None
    # One future per blocked reader; an append resolves them all so each re-reads from its own cursor.
    waiters: list[asyncio.Future[None]] = field(default_factory=list)


class InMemoryEventStream:
    """Streams per key in process memory; ``max_len`` trims exactly where Redis trims approximately (``~``)."""

    def __init__(self, *, max_len: int = 10_000, ttl_s: int | None = None) -> None:
        """``ttl_s``: every key expires that long after its last write (as the Redis adapter's); None: never."""
        self._max_len = max_len
        self._ttl_s = ttl_s
        self._streams: dict[str, _Stream] = {}

    def _live(self, key: str) -> _Stream | None:
        stream = self._streams.get(key)
        if stream is not None and stream.expires_at is not None and time.monotonic() >= stream.expires_at:
            # An expired key is gone, ids included, exactly as in Redis; blocked readers keep waiting on it.
            del self._streams[key]
            fresh = _Stream(waiters=stream.waiters)
            if fresh.waiters:
                self._streams[key] = fresh
                return fresh
            return None
        return stream

    def _next_id(self, stream: _Stream) -> EntryId:
        now_ms = int(time.time() * 1000)
        last_ms, last_seq = stream.last_id
        return (now_ms, 0) if now_ms > last_ms else (last_ms, last_seq + 1)

    async def append(self, key: str, event: dict[str, Any]) -> str:
        entry_id = self._append(key, event)
        await asyncio.sleep(0)  # a real client yields on every request; so does the fake
        return entry_id

    async def append_batch(
        self,
        entries: Sequence[tuple[str, dict[str, Any]]],
        *,
        clear: str | None = None,
        encoded: Sequence[str] | None = None,
    ) -> list[str]:
        """One request, as Redis's pipeline: ``DEL clear`` (gone at once, as an expired key), then the appends."""
        stream = self._streams.get(clear) if clear is not None else None
        if stream is not None:
            stream.expires_at = time.monotonic()
        texts = encoded if encoded is not None else [None] * len(entries)
        ids = [self._append(key, event, text) for (key, event), text in zip(entries, texts, strict=True)]
        await asyncio.sleep(0)
        return ids

    def _append(self, key: str, event: dict[str, Any], text: str | None = None) -> str:
        payload = dumps(event) if text is None else text
        stream = self._live(key)
        if stream is None:
            stream = self._streams[key] = _Stream()
        if self._ttl_s is not None:
            stream.expires_at = time.monotonic() + self._ttl_s
        entry_id = self._next_id(stream)
        stream.last_id = entry_id
        stream.entries.append((entry_id, payload))
        while len(stream.entries) > self._max_len:
            stream.entries.popleft()
        waiters, stream.waiters = stream.waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
        return format_entry_id(entry_id)

    def _read(self, key: str, after: EntryId, count: int) -> list[StreamEntry]:
        stream = self._live(key)
        if stream is None:
            return []
        out: list[StreamEntry] = []
        for entry_id, payload in stream.entries:
            if entry_id > after:
                out.append(StreamEntry(id=format_entry_id(entry_id), event=json.loads(payload), json=payload))
                if len(out) >= count:
                    break
        return out

    async def read_after(self, key: str, after_id: str, *, block_ms: int, count: int = 100) -> list[StreamEntry]:
        after = parse_entry_id(after_id)
        entries = self._read(key, after, count)
        if entries or block_ms <= 0:
            await asyncio.sleep(0)
            return entries
        deadline = asyncio.get_running_loop().time() + block_ms / 1000
        while True:
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                return []
            stream = self._live(key)
            if stream is None:
                stream = self._streams[key] = _Stream()
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            stream.waiters.append(waiter)
            try:
                await asyncio.wait_for(waiter, timeout=remaining)
            except TimeoutError:
                return []
            finally:
                if waiter in stream.waiters:
                    stream.waiters.remove(waiter)
                if not stream.entries and not stream.waiters and self._streams.get(key) is stream:
                    del self._streams[key]  # a key with no entries does not exist in Redis either
            entries = self._read(key, after, count)
            if entries:
                return entries

    async def oldest_id(self, key: str) -> str | None:
        stream = self._live(key)
        await asyncio.sleep(0)
        return format_entry_id(stream.entries[0][0]) if stream is not None and stream.entries else None

    async def expire(self, key: str, seconds: int) -> None:
        stream = self._live(key)
        if stream is not None and stream.entries:
            stream.expires_at = time.monotonic() + seconds
        await asyncio.sleep(0)

    async def delete(self, keys: Sequence[str]) -> None:
        """Remove streams at once (erasure); blocked readers keep waiting on the now empty keys."""
        for key in keys:
            stream = self._streams.pop(key, None)
            if stream is not None and stream.waiters:
                self._streams[key] = _Stream(waiters=stream.waiters)
        await asyncio.sleep(0)

    async def ping(self) -> bool:
        return True

    async def close(self) -> None:
        for stream in self._streams.values():
            for waiter in stream.waiters:
                waiter.cancel()
        self._streams.clear()
