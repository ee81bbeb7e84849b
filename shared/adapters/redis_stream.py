"""Redis streams adapter for the ``EventStream`` port.

Works on a single node and on cluster-mode servers (ElastiCache Serverless is always cluster mode and TLS): keys
that are used together share a hash tag (``run:{tenant/run}:events``), and nothing uses ``SELECT``.
"""

from __future__ import annotations

import json
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


class RedisEventStream:
    """Each event is one stream entry with a single field ``e`` holding the event's JSON (read back as
    ``StreamEntry.json``, which the SSE frames carry as is)."""

    def __init__(self, client: RedisClient, *, max_len: int = 10_000) -> None:
        self._client = client
        self._max_len = max_len

    async def append(self, key: str, event: dict[str, Any]) -> str:
        entry_id = await self._client.xadd(key, {"e": dumps(event)}, maxlen=self._max_len, approximate=True)
        return entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)

    async def append_batch(
        self, entries: Sequence[tuple[str, dict[str, Any]]], *, clear: str | None = None
    ) -> list[str]:
        """One pipeline (one round trip on a single node): ``DEL clear`` if given, then one XADD per entry."""
        pipe = self._client.pipeline(transaction=False)
        if clear is not None:
            pipe.delete(clear)
        for key, event in entries:
            pipe.xadd(key, {"e": dumps(event)}, maxlen=self._max_len, approximate=True)
        results: list[Any] = await pipe.execute()
        ids = results[1:] if clear is not None else results
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

    async def expire(self, key: str, seconds: int) -> None:
        await self._client.expire(key, seconds)

    async def delete(self, keys: Sequence[str]) -> None:
        """Remove streams at once (erasure); one pipeline, one ``DEL`` per key so a cluster routes each by slot."""
        if not keys:
            return
        pipe = self._client.pipeline(transaction=False)
        for key in keys:
            pipe.delete(key)
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
