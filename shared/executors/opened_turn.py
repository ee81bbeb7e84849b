"""A run's first model request, sent while admission's write (the messages and the run record) is in flight.

Why: after the claim and its reads, admission knows the context window the run will have (the history it read
and the messages it is about to store), so the first model request need not wait for the write. The model takes
hundreds of milliseconds to its first token, the write one round trip; by the time a chunk arrives the run is
stored, or refused and the request closed.

Correctness never rests on the guess: the executor builds its first request again from what admission actually
stored, and takes the opened stream only when the two requests are equal; otherwise the opened one is closed and a
new one sent, as without it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable

from shared.llm.types import ChatChunk, ChatRequest
from shared.ports.model import ChatModel

logger = logging.getLogger(__name__)


class OpenedTurn:
    """One model stream opened ahead of its turn: ``build`` makes the request (None: open nothing); a task of its own
    then reads the stream as it arrives, so the response is consumed at the model's pace (the connection goes back
    to the client's pool when the answer ends, as it would if the turn read it, not when the turn gets to it: a
    connection returned late is more likely to be reused just as the server closes it for idleness)."""

    def __init__(self, model: ChatModel, build: Awaitable[ChatRequest | None]) -> None:
        self.request: ChatRequest | None = None
        self.provider = model.provider
        self._model = model
        self._chunks: asyncio.Queue[ChatChunk | None] = asyncio.Queue()
        """The chunks read so far; None after the last one (or after those that came before a failure)."""
        self._reading = asyncio.ensure_future(self._read(build))

    async def _read(self, build: Awaitable[ChatRequest | None]) -> None:
        request = await build
        if request is None:
            return
        self.request = request
        try:
            async for chunk in self._model.stream(request):
                self._chunks.put_nowait(chunk)
        finally:
            self._chunks.put_nowait(None)

    def matches(self, request: ChatRequest) -> bool:
        """Whether this stream was opened for exactly ``request``."""
        return self.request is not None and self.request == request

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatChunk]:
        """The opened stream, from its first chunk (``request`` is the one it was opened for: see ``matches``); after
        the chunks it delivered, raises what the model adapter raised. Leaving it early (the turn cancelled) stops
        the reading, which closes the model's response."""
        if not self.matches(request):
            raise ValueError("the opened stream was opened for another request")
        try:
            while (chunk := await self._chunks.get()) is not None:
                yield chunk
            await self._reading
        finally:
            if not self._reading.done():
                self._reading.cancel()

    async def list_models(self) -> list[str]:
        return await self._model.list_models()

    async def discard(self) -> None:
        """Close it, unused: the run was refused or attached to, or its first request turned out different."""
        self._reading.cancel()
        await asyncio.wait([self._reading])
        if not self._reading.cancelled() and self._reading.exception() is not None:
            logger.warning("a model request opened ahead of its turn failed", exc_info=self._reading.exception())
