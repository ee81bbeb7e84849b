"""SSE framing of stream entries: ``id:`` is the stream entry id, frames end with ``\\n\\n`` (never ``\\r\\n``)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from shared.ports import StreamEntry

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no", "Connection": "keep-alive"}
PING = ": ping\n\n"


def frame(entry: StreamEntry) -> str:
    return f"id: {entry.id}\ndata: {json.dumps(entry.event, separators=(',', ':'), ensure_ascii=False)}\n\n"


async def frames(entries: AsyncIterator[StreamEntry | None]) -> AsyncIterator[str]:
    async for entry in entries:
        yield PING if entry is None else frame(entry)
