"""Redis streams adapter for the ``EventStream`` port.

Works on a single node and on cluster-mode servers (ElastiCache Serverless is always cluster mode and TLS): keys
that are used together share a hash tag (``run:{tenant/run}:events``), and nothing uses ``SELECT``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.driver_info import DriverInfo

from shared.event_json import dumps
from shared.ports import StreamEntry

RedisClient = Redis | RedisCluster


from shared.stream_keys import run_stream_key, thread_stream_key  # noqa: E402  (re-exported)

__all__ = ["RedisClient", "RedisEventStream", "connect", "run_stream_key", "thread_stream_key"]


DEFAULT_TTL_S = 24 * 3600
"""How long a stream is kept after its last write (setting ``EVENT_STREAM_TTL_S``; template.yaml)."""
TTL_REFRESH_S = 60.0
"""A key's TTL is set again at most this often by one process: one ``EXPIRE`` per key a minute, not per event."""
_REFRESHED_KEYS = 4096


class RedisEventStream:
    """Each event is one stream entry with a single field ``e`` holding the event's JSON (read back as
    ``StreamEntry.json``, which the SSE frames carry as is).

    Every key it writes expires ``ttl_s`` after its last write: the first write of a key (and then one a minute)
    carries an ``EXPIRE`` in the same pipeline, so Redis never keeps a stream for good (docs/storage.md)."""

    def __init__(self, client: RedisClient, *, max_len: int = 10_000, ttl_s: int = DEFAULT_TTL_S) -> None:
        self._client = client
        self._max_len = max_len
        self._ttl_s = ttl_s
        self._refreshed: dict[str, float] = {}

    def _due(self, keys: Sequence[str]) -> list[str]:
        """The keys whose TTL this process has not set within ``TTL_REFRESH_S``, now marked as set."""
        now = time.monotonic()
        due = [k for k in dict.fromkeys(keys) if now - self._refreshed.get(k, -TTL_REFRESH_S) >= TTL_REFRESH_S]
        if due and len(self._refreshed) + len(due) > _REFRESHED_KEYS:
            self._refreshed.clear()
        for key in due:
            self._refreshed[key] = now
        return due

    async def append(self, key: str, event: dict[str, Any]) -> str:
        if not self._due([key]):
            entry_id = await self._client.xadd(key, {"e": dumps(event)}, maxlen=self._max_len, approximate=True)
            return entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
        return (await self.append_batch([(key, event)]))[0]

    async def append_batch(
        self,
        entries: Sequence[tuple[str, dict[str, Any]]],
        *,
        clear: str | None = None,
        encoded: Sequence[str] | None = None,
    ) -> list[str]:
        """One pipeline (one round trip on a single node): ``DEL clear`` if given, one XADD per entry, then an
        ``EXPIRE`` for each key whose TTL is due."""
        pipe = self._client.pipeline(transaction=False)
        if clear is not None:
            pipe.delete(clear)
            self._refreshed.pop(clear, None)
        texts = encoded if encoded is not None else [dumps(event) for _, event in entries]
        for (key, _event), text in zip(entries, texts, strict=True):
            pipe.xadd(key, {"e": text}, maxlen=self._max_len, approximate=True)
        for key in self._due([key for key, _ in entries]):
            pipe.expire(key, self._ttl_s)
        results: list[Any] = await pipe.execute()
        first = 1 if clear is not None else 0
        ids = results[first : first + len(entries)]
        return [i.decode() if isinstance(i, bytes) else str(i) for i in ids]

    async def read_after(self, key: str, after_id: str, *, block_ms: int, count: int = 100) -> list[StreamEntry]:
        resp: Any = await self._client.xread({key: after_id}, count=count, block=block_ms if block_ms > 0 else None)
        entries: list[StreamEntry] = []
        for _key, items in resp or []:
            for entry_id, fields in items:
                raw = fields.get(b"e") if b"e" in fields else fields.get("e")
                text = raw.decode() if isinstance(raw, bytes) else str(raw)
                eid = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
                entries.append(StreamEntry(id=eid, event=json.loads(text), json=text))
        return entries

    async def oldest_id(self, key: str) -> str | None:
        """``XRANGE key - + COUNT 1``: the oldest entry's id, or None for a key that holds nothing."""
        resp: Any = await self._client.xrange(key, count=1)
        if not resp:
            return None
        entry_id = resp[0][0]
        return entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)

    async def expire(self, key: str, seconds: int) -> None:
        """An explicit TTL (a control signal's, or 0 to drop a key); the next write's refresh does not undo it
        within ``TTL_REFRESH_S``."""
        await self._client.expire(key, seconds)
        if seconds <= 0:
            self._refreshed.pop(key, None)

    async def delete(self, keys: Sequence[str]) -> None:
        """Remove streams at once (erasure); one pipeline, one ``DEL`` per key so a cluster routes each by slot."""
        if not keys:
            return
        pipe = self._client.pipeline(transaction=False)
        for key in keys:
            pipe.delete(key)
            self._refreshed.pop(key, None)
        await pipe.execute()

    async def ping(self) -> bool:
        return bool(await self._client.ping())

    async def close(self) -> None:
        await self._client.aclose()


def connect(url: str, *, cluster: bool) -> RedisClient:
    """A client for ``url`` (``redis://`` or ``rediss://`` for TLS), in cluster or single-node mode."""
    # Timeouts so that a Redis that hangs without closing connections fails fast instead of blocking runs (the run
    # service buffers events and readers retry; see docs/reliability.md). Blocking reads pass their own timeout.
    options: dict[str, Any] = {"socket_connect_timeout": 2.0, "socket_timeout": 20.0, "health_check_interval": 15}
    # What each connection tells the server with CLIENT SETINFO, resolved once here: left to redis-py, every new
    # connection looks its own version up in the installed distributions' metadata (3 ms of CPU here, each time
    # the pool grows under a burst of runs).
    options["driver_info"] = DriverInfo()
    if cluster:
        return RedisCluster.from_url(url, **options)
    return Redis.from_url(url, **options)
