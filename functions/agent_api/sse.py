"""SSE framing of stream entries: ``id:`` is the stream entry id, frames end with ``\\n\\n`` (never ``\\r\\n``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from shared.event_json import dumps
from shared.ports import StreamEntry

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no", "Connection": "keep-alive"}
PING = ": ping\n\n"


def frame(entry: StreamEntry) -> str:
    """The entry's JSON as the stream stored it (encoded once, by the emitter), never re-encoded."""
    return f"id: {entry.id}\ndata: {entry.json if entry.json is not None else dumps(entry.event)}\n\n"


async def frames(entries: AsyncIterator[StreamEntry | None]) -> AsyncIterator[str]:
    async for entry in entries:
        yield PING if entry is None else frame(entry)


class OwnedRunResponse(StreamingResponse):
    """The SSE response of the request that started a run: it ends only once the run has settled.

    On Lambda the invocation lasts as long as this request, and the environment is frozen when it ends. When the
    client leaves mid-run the body stops, but the request still waits for ``settled`` (the run's ledger entry, thread
    release, metrics, publish and terminal event), so the invocation owns its run to the end.
    """

    def __init__(self, content: AsyncIterator[str], *, settled: Callable[[], Awaitable[None]], **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._settled = settled

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._settled()
