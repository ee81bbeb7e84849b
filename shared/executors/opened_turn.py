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
    """One model stream opened ahead of its turn: ``build`` makes the request (None: open nothing), then the stream
    is opened and its first chunk awaited, in a task of its own."""

    def __init__(self, model: ChatModel, build: Awaitable[ChatRequest | None]) -> None:
        self.request: ChatRequest | None = None
        self.provider = model.provider
        self._model = model
        self._chunks: AsyncIterator[ChatChunk] | None = None
        self._first = asyncio.ensure_future(self._open(build))

    async def _open(self, build: Awaitable[ChatRequest | None]) -> ChatChunk | None:
        request = await build
        if request is None:
            return None
        self.request = request
        self._chunks = aiter(self._model.stream(request))
        try:
            return await anext(self._chunks)
        except StopAsyncIteration:
            return None

    def matches(self, request: ChatRequest) -> bool:
        """Whether this stream was opened for exactly ``request``."""
        return self.request is not None and self.request == request

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatChunk]:
        """The opened stream, from its first chunk (``request`` is the one it was opened for: see ``matches``);
        raises what opening it raised (the model adapter's own errors, after its own retries)."""
        if not self.matches(request):
            raise ValueError("the opened stream was opened for another request")
        first = await self._first
        if first is None or self._chunks is None:
            return
        yield first
        async for chunk in self._chunks:
            yield chunk

    async def list_models(self) -> list[str]:
        return await self._model.list_models()

    async def discard(self) -> None:
        """Close it, unused: the run was refused or attached to, or its first request turned out different."""
        self._first.cancel()
        await asyncio.wait([self._first])
        if not self._first.cancelled() and self._first.exception() is not None:
            logger.warning("a model request opened ahead of its turn failed", exc_info=self._first.exception())
        close = getattr(self._chunks, "aclose", None)
        if close is not None:
            try:
                await close()
            except Exception:
                logger.warning("could not close a model stream opened ahead of its turn", exc_info=True)

